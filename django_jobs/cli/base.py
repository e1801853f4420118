"""What every ``manage.py jobs`` subcommand shares: how it is declared, who acts, which jobs.

Each module of this package declares its subcommands through an ``AddSubcommand``
(given by the command, so every subcommand takes ``--backend``) and names the
function that runs it; the command calls that function with itself (for
``stdout`` and ``stderr``), the backend and the parsed options.
"""

from __future__ import annotations

import getpass
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobs.backend import JobsBackend

Handler = Callable[[BaseCommand, JobsBackend, dict[str, Any]], None]


class AddSubcommand(Protocol):
    def __call__(
        self, name: str, text: str, handler: Handler, *, details: str | None = None
    ) -> CommandParser:
        """Add subcommand ``name``, run by ``handler``.

        ``text`` is its line in ``jobs --help``; ``details``, if longer, heads
        its own ``--help``.
        """


def default_actor() -> str:
    """``cli:<os user>``: who ran the command, as far as this host knows."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):  # no login name and no passwd entry (some containers)
        user = f"uid{os.getuid()}"
    return f"cli:{user}"


def parse_ids(values: Sequence[str]) -> list[uuid.UUID]:
    """All ids, or a CommandError naming every malformed one before anything is changed."""
    ids: list[uuid.UUID] = []
    bad: list[str] = []
    for value in values:
        try:
            ids.append(uuid.UUID(value))
        except ValueError:
            bad.append(value)
    if bad:
        raise CommandError(
            f"Not a job id (a UUID): {', '.join(repr(b) for b in bad)}.", returncode=1
        )
    return list(dict.fromkeys(ids))  # the same id twice would be refused the second time
