"""The operator verbs are declared once, in ``django_jobs.verbs.VERBS``, and built into everything.

Each interface is read back as its users meet it (the admin's actions, the
API's routes, the CLI's subcommands, the model's permissions), so a verb
listed by hand anywhere, or left out, fails here; and a verb added to
``VERBS`` in a fresh process shows up in all four.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.core.management import load_command_class
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from django_jobs.api.views import JobViewSet
from django_jobs.models import Job, JobEvent
from django_jobs.states import TRANSITIONS
from django_jobs.verbs import VERBS, Verb
from tests.conftest import ROOT

URLS = "tests.all_urls"  # the admin and the API

# -- how each interface shows the verbs ---------------------------------------------------


def admin_verbs() -> set[str]:
    """The verbs of the job list's bulk actions, each with the permission check Django asks."""
    model_admin = admin.site.get_model_admin(Job)
    names = set()
    for action in model_admin.actions or ():
        assert not isinstance(action, str)
        (permission,) = action.allowed_permissions  # type: ignore[attr-defined]
        assert action.__name__ == f"{permission}_jobs"
        assert callable(getattr(model_admin, f"has_{permission}_permission"))
        names.add(permission)
    return names


def api_verbs() -> set[str]:
    """The POST actions on a job that the API's router publishes, and their bulk form."""
    extras = [extra for extra in JobViewSet.get_extra_actions() if "post" in extra.mapping]
    single = {extra.url_path for extra in extras if extra.detail}
    bulk = {extra.url_path.removeprefix("bulk/") for extra in extras if not extra.detail}
    assert single == bulk
    return single


def cli_subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = load_command_class("django_jobs", "jobs").create_parser("manage.py", "jobs")
    (subparsers,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(subparsers.choices)


def cli_verbs() -> set[str]:
    """The subcommands that take job ids."""
    return {
        name
        for name, sub in cli_subcommands().items()
        if any(action.dest == "ids" for action in sub._actions)
    }


def permission_verbs() -> set[str]:
    """The verbs whose permission the Job model declares."""
    return {codename.removesuffix("_job") for codename, _ in Job._meta.permissions}


# -- one declaration ------------------------------------------------------------------------


@pytest.mark.parametrize("verb", VERBS.values(), ids=list(VERBS))
def test_each_verb_takes_only_transitions_of_the_table(verb: Verb) -> None:
    # Or, a verb that changes no state, copies jobs of the states it names.
    assert bool(verb.transitions) != bool(verb.copies_from)
    assert len(set(verb.transitions)) == len(verb.transitions)
    assert all(transition in TRANSITIONS for transition in verb.transitions)


@pytest.mark.parametrize("verb", VERBS.values(), ids=list(VERBS))
def test_each_verb_is_an_admin_action_an_api_route_a_cli_subcommand_and_a_permission(
    verb: Verb,
) -> None:
    job_id = uuid.UUID(int=1)
    assert verb.name in admin_verbs()
    assert verb.name in api_verbs()
    assert reverse(f"django_jobs_api:job-{verb.name}", args=[job_id], urlconf=URLS) == (
        f"/api/jobs/{job_id}/{verb.name}/"
    )
    assert verb.name in cli_verbs()
    note = next(a for a in cli_subcommands()[verb.name]._actions if a.dest == "note")
    assert note.required is verb.needs_note
    assert (verb.codename, verb.permission_name) in Job._meta.permissions


def test_no_interface_offers_a_verb_that_is_not_declared() -> None:
    assert admin_verbs() == api_verbs() == cli_verbs() == permission_verbs() == set(VERBS)


def test_a_verb_added_to_verbs_appears_in_every_interface() -> None:
    # A fresh process, since the interfaces are built when their modules load.
    script = """
import dataclasses, json, django
from django_jobs import verbs
verbs.VERBS["hold"] = dataclasses.replace(
    verbs.VERBS["quarantine"], name="hold", permission_name="Can hold jobs"
)
django.setup()
from tests import test_verbs as t
print(json.dumps([sorted(f()) for f in (
    t.admin_verbs, t.api_verbs, t.cli_verbs, t.permission_verbs
)]))
"""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    expected = sorted([*VERBS, "hold"])
    assert json.loads(done.stdout) == [expected] * 4


@pytest.mark.postgres
def test_each_verb_permission_exists_in_the_database(db: None) -> None:
    declared = {(verb.codename, verb.permission_name) for verb in VERBS.values()}
    stored = set(
        Permission.objects.filter(content_type__app_label="django_jobs").values_list(
            "codename", "name"
        )
    )
    assert declared <= stored


# -- one permission per verb ----------------------------------------------------------------


def make_job(verb: Verb) -> Job:
    """A job in a state the verb applies to, written directly: test set-up, not a transition."""
    now = timezone.now()
    return Job.objects.create(
        task_name="tests.testapp.tasks.add",
        args=[1, 2],
        state=verb.source_states()[0],
        attempts=1,
        max_attempts=3,
        run_after=now + timedelta(hours=1),  # scheduled: run_now applies
        enqueued_at=now,
        updated_at=now,
    )


def holder_of(verb: Verb) -> User:
    """A staff user who may read jobs and apply this one verb."""
    user = User.objects.create_user(f"{verb.name}-only", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_jobs", codename__in=["view_job", verb.codename]
        )
    )
    return user


def changed(job: Job) -> bool:
    return JobEvent.objects.filter(job=job).exists()


@pytest.mark.postgres
@pytest.mark.urls(URLS)
@pytest.mark.parametrize("held", VERBS.values(), ids=list(VERBS))
def test_one_verbs_permission_allows_that_verb_only_in_the_admin(db: None, held: Verb) -> None:
    client = Client()
    client.force_login(holder_of(held))
    jobs = {name: make_job(verb) for name, verb in VERBS.items()}

    answers = {
        name: client.post(
            reverse("admin:django_jobs_job_verb", args=[job.pk, name]), {"note": "why"}
        ).status_code
        for name, job in jobs.items()
    }
    offered = client.get(reverse("admin:django_jobs_job_changelist")).context["action_form"]

    assert answers == {name: 302 if name == held.name else 403 for name in VERBS}
    assert {name: changed(job) for name, job in jobs.items()} == {
        name: name == held.name for name in VERBS
    }
    assert [name for name, _ in offered.fields["action"].choices if name] == [f"{held.name}_jobs"]


@pytest.mark.postgres
@pytest.mark.urls(URLS)
@pytest.mark.parametrize("held", VERBS.values(), ids=list(VERBS))
def test_one_verbs_permission_allows_that_verb_only_in_the_api(db: None, held: Verb) -> None:
    client = APIClient()
    client.force_login(holder_of(held))
    jobs = {name: make_job(verb) for name, verb in VERBS.items()}

    answers: dict[str, Any] = {
        name: client.post(f"/api/jobs/{job.pk}/{name}/", {"note": "why"}, format="json")
        for name, job in jobs.items()
    }

    assert {name: r.status_code for name, r in answers.items()} == {
        name: 200 if name == held.name else 403 for name in VERBS
    }
    assert {name: changed(job) for name, job in jobs.items()} == {
        name: name == held.name for name in VERBS
    }
