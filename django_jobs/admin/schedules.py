"""The schedules page: periodic schedules, edited and switched by operators.

Rows declared in ``OPTIONS["SCHEDULES"]`` are owned by settings — the
scheduler's sync rewrites their fields at every worker start — so here only
their ``enabled`` switch is editable; rows added here are fully editable and
never touched by the sync. Everything an operator saves is validated as
strictly as settings are: the cron expression (it must ever fire), the
timezone, a registered task, a configured queue.

``next_fire_at`` is the scheduler's compare-and-set column, so a save writes
only the fields that changed, and resets ``next_fire_at`` to the next tick
when the cron or timezone changed or the schedule was switched on (the time
spent disabled is not "missed": nothing catches it up).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ImproperlyConfigured
from django.db import router
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from .. import registry, schedules
from ..backend import JobsBackend, jobs_backend
from ..conf import MAX_CATCH_UP_LIMIT, cron_problem, timezone_problem
from ..exceptions import EnqueueError, NotAJobsBackendError
from ..models import Schedule
from ..payload import check_arguments
from ..tasks import JobTask


class ScheduleForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Schedule
        fields = ("name", "enabled", *schedules.DECLARED_FIELDS)

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        zone = data.get("timezone")
        if zone is not None and (problem := timezone_problem(zone)):
            self.add_error("timezone", problem)
            zone = None
        cron = data.get("cron")
        if cron is not None and (problem := cron_problem(cron, zone or "UTC")):
            self.add_error("cron", problem)
        backend: JobsBackend | None = None
        try:
            backend = jobs_backend(data.get("backend", "default"))
        except ImproperlyConfigured as exc:
            if "backend" in data:
                self.add_error("backend", str(exc))
        here = router.db_for_write(Schedule)
        if backend is not None and backend.db != here:
            # Its schedulers read schedules from its own database; saved here, it never fired.
            self.add_error(
                "backend",
                f"{backend.alias!r} keeps its jobs in the database {backend.db!r}, and this "
                f"admin saves schedules in {here!r}: declare its schedules in its "
                "OPTIONS['SCHEDULES'] instead.",
            )
        name = data.get("task_name")
        if name is not None:
            registry.discover(backend.settings.TASK_MODULES if backend else ())
            if not isinstance(registry.get(name), JobTask):
                self.add_error(
                    "task_name", f"{name!r} is not a registered django_jobs task in this process."
                )
        queue = data.get("queue")
        if queue is not None and backend is not None and queue not in backend.queues:
            self.add_error(
                "queue", f"{queue!r} is not one of the backend's queues: {sorted(backend.queues)}."
            )
        if "args" in data and not isinstance(data["args"], list):
            self.add_error("args", "args must be a JSON list.")
        if "kwargs" in data and not isinstance(data["kwargs"], dict):
            self.add_error("kwargs", "kwargs must be a JSON object.")
        args, kwargs = data.get("args"), data.get("kwargs")
        if isinstance(args, list) and isinstance(kwargs, dict) and backend is not None:
            # What an enqueue refuses (text PostgreSQL cannot hold, a size past
            # the bound) failed the save with a DataError, or every tick after it.
            try:
                check_arguments(args, kwargs, backend.settings.MAX_PAYLOAD_BYTES)
            except EnqueueError as exc:
                self.add_error("args", str(exc))
        catch_up = data.get("max_catch_up")
        if catch_up is not None and not 1 <= catch_up <= MAX_CATCH_UP_LIMIT:
            self.add_error("max_catch_up", f"must be from 1 to {MAX_CATCH_UP_LIMIT}.")
        priority = data.get("priority")
        if priority is not None and not -100 <= priority <= 100:
            self.add_error("priority", "must be from -100 to 100.")
        return data


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = ScheduleForm
    list_display = (
        "name",
        "enabled",
        "cron",
        "timezone",
        "task_name",
        "queue",
        "next_fire_at",
        "last_fired_at",
        "missed",
        "source",
        "has_error",
    )
    list_filter = ("enabled", "source", "missed", "queue")
    search_fields = ("name", "task_name")
    actions = ("enable", "disable", "run_now")
    readonly_fields = ("source", "next_fire_at", "last_fired_at", "last_error", "created_at")
    DECLARED = ("name", *schedules.DECLARED_FIELDS)

    class Media:
        css = {"all": ("django_jobs/admin.css",)}

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is not None and obj.source == Schedule.Source.SETTINGS:
            return (*self.DECLARED, *self.readonly_fields)
        if obj is not None:
            return ("name", *self.readonly_fields)  # the name is in every tick's key
        return tuple(self.readonly_fields)

    @admin.display(description=_("error"), boolean=True)
    def has_error(self, schedule: Schedule) -> bool:
        return bool(schedule.last_error)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        retime = not change or any(
            name in form.changed_data for name in ("cron", "timezone", "enabled")
        )
        if retime:
            obj.next_fire_at = schedules.next_tick(obj.cron, obj.timezone, timezone.now())
        if not change:
            obj.source = Schedule.Source.ADMIN
            obj.save()
            return
        # Only what the operator changed: next_fire_at may have moved since the form loaded.
        fields = [name for name in form.changed_data if name in {f.name for f in obj._meta.fields}]
        if retime:
            fields.append("next_fire_at")
        if fields:
            obj.save(update_fields=[*fields, "updated_at"])

    # -- actions ---------------------------------------------------------------

    @admin.action(
        description=_("Enable selected schedules (from their next tick)"), permissions=["change"]
    )
    def enable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        now = timezone.now()
        count = 0
        for schedule in queryset.filter(enabled=False):
            Schedule.objects.using(queryset.db).filter(pk=schedule.pk, enabled=False).update(
                enabled=True,
                next_fire_at=schedules.next_tick(schedule.cron, schedule.timezone, now),
                updated_at=now,
            )
            count += 1
        self.message_user(request, f"Enabled {count} schedule(s).", messages.SUCCESS)

    @admin.action(description=_("Disable selected schedules"), permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = queryset.filter(enabled=True).update(enabled=False, updated_at=timezone.now())
        self.message_user(request, f"Disabled {count} schedule(s).", messages.SUCCESS)

    @admin.action(description=_("Run selected schedules now"), permissions=["run"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            try:
                backend = jobs_backend(schedule.backend)
                result = schedules.run_now(backend, schedule, request.user.get_username())
            except (NotAJobsBackendError, EnqueueError) as exc:
                self.message_user(request, f"{schedule.name}: {exc}", messages.ERROR)
                continue
            self.message_user(
                request, f"{schedule.name}: enqueued job {result.id}.", messages.SUCCESS
            )

    def has_run_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("django_jobs.run_schedule")
