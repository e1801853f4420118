"""The OpenAPI 3 document of the API, by drf-spectacular.

The served schema (``<mount>/schema/``) and the committed ``docs/openapi.yaml``
come from the same function with the same settings, which are applied per
view so that a project's own ``SPECTACULAR_SETTINGS`` neither change our
document nor are changed by it. Only django_jobs' own endpoints are included,
whatever else the project serves with DRF.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiYamlRenderer
from drf_spectacular.settings import patched_settings
from drf_spectacular.views import SpectacularAPIView

TITLE = "django-jobs API"

SETTINGS: dict[str, Any] = {
    "TITLE": TITLE,
    "DESCRIPTION": (
        "Job status and repair for django-jobs: jobs, their attempts and audit trail, "
        "queue statistics, workers, the operator verbs, and queue pause and resume. Who may "
        "see and do what is decided by the configured authority policy; a job outside your "
        "scope answers 404."
    ),
    "VERSION": "1",
    "PREPROCESSING_HOOKS": ["django_jobs.api.schema.only_django_jobs"],
    "ENUM_NAME_OVERRIDES": {
        "JobStateEnum": "django_jobs.states.JobState.choices",
        "AttemptOutcomeEnum": "django_jobs.states.AttemptOutcome.choices",
        "TaskResultStatusEnum": "django_jobs.framework.TaskResultStatus.choices",
    },
    "COMPONENT_SPLIT_REQUEST": True,
}


def only_django_jobs(endpoints: list[tuple[Any, ...]], **kwargs: Any) -> list[tuple[Any, ...]]:
    """Keep our endpoints: the project's other DRF views are its own business."""
    return [
        endpoint
        for endpoint in endpoints
        if getattr(getattr(endpoint[3], "cls", None), "__module__", "").startswith(
            "django_jobs.api."
        )
        and not endpoint[0].endswith("/schema/")
    ]


class SchemaView(SpectacularAPIView):
    """``GET <mount>/schema/``: YAML by default, JSON with ``?format=json``."""

    custom_settings = SETTINGS


def generate(urlconf: str | None = None) -> dict[str, Any]:
    """The schema as a dict, for the URLconf given (default: ROOT_URLCONF)."""
    with patched_settings(SETTINGS):
        # drf-spectacular ships py.typed but leaves these two untyped.
        generator = SchemaGenerator(urlconf=urlconf)  # type: ignore[no-untyped-call]
        schema: dict[str, Any] = generator.get_schema(request=None, public=True)  # type: ignore[no-untyped-call]
    return schema


def render_yaml(schema: dict[str, Any]) -> str:
    """The schema as ``docs/openapi.yaml`` holds it."""
    renderer = OpenApiYamlRenderer()
    rendered: bytes = renderer.render(schema, renderer_context={})  # type: ignore[no-untyped-call]
    return rendered.decode()
