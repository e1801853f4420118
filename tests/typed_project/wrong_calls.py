"""Calls the typed API must refuse; tests/test_typing.py expects each error below.

Each line that must fail ends with ``# wrong: <mypy error code>``; the test
checks that mypy reports errors on exactly those lines, each with its code
among them. A separate file, because the rest of the project must pass.
"""

from __future__ import annotations

from billing.tasks import add, rebuild_index, send_receipt

from django_jobs import JobContext, task

add.enqueue("1", 2)  # wrong: arg-type
add.enqueue(1)  # wrong: call-arg
send_receipt.using(tenant="acme", priority="high")  # wrong: arg-type
send_receipt.using(tennant="acme")  # wrong: call-arg
send_receipt.using(after=3.5)  # wrong: arg-type
send_receipt.using(unique_key="k", unique_for=60)  # wrong: arg-type
send_receipt.using(unique_key="k", debounce="5m")  # wrong: arg-type
send_receipt.using(unique_key="k", unique_states=[3])  # wrong: list-item
rebuild_index.enqueue(None, [1])  # wrong: call-arg
name: str = add.enqueue(1, 2).return_value  # wrong: assignment
print(add.enqueue(1, 2).status_text)  # wrong: attr-defined


@task(max_attempts="five")  # wrong: call-overload
def bad_option() -> None: ...


@task(takes_context=True)  # wrong: arg-type
def no_context(order_id: int) -> None: ...


def plus(a: int, b: int) -> int:
    return a + b


def steps(context: JobContext) -> str:
    context.step("sum", plus, "1", 2)  # wrong: arg-type
    context.sleep("soon")  # wrong: arg-type
    return context.step("sum", plus, 1, 2)  # wrong: return-value
