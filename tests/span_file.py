"""Worker processes started by tests/test_tracing.py write their finished spans here, as JSON lines.

A real worker runs in another process: this exporter is how the test reads
what that process's spans said.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


def as_dict(span: ReadableSpan) -> dict[str, Any]:
    """The parts of a span the tests compare, with ids in hex as tracing UIs show them."""
    context = span.get_span_context()
    assert context is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "attributes": dict(span.attributes or {}),
        "links": [f"{link.context.span_id:016x}" for link in span.links],
        "status": span.status.status_code.name,
    }


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        # Opened per export, appending: forked worker processes share the file.
        with open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(as_dict(span)) + "\n")
        return SpanExportResult.SUCCESS


def export_spans_to(path: str) -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(path)))
    trace.set_tracer_provider(provider)


class BrokenProcessor(SpanProcessor):
    """A span processor with a bug: it raises as a worker's ``process`` span starts."""

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        if span.name.startswith("process "):
            raise RuntimeError("a broken span processor")


def break_tracing() -> None:
    provider = TracerProvider()
    provider.add_span_processor(BrokenProcessor())
    trace.set_tracer_provider(provider)
