"""Storage engines: how jobs are stored, claimed and finished on one database.

``engine_for`` picks the engine by the database's vendor (``vendors.py``),
once, when a backend is built; everything else calls the engine it was given.
This package's root imports no model, so the system checks may ask
``vendors`` what a database needs before the app is known to be installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .vendors import engine_class, vendor

if TYPE_CHECKING:
    from ..conf import JobsOptions
    from .base import Engine

__all__ = ["engine_for"]


def engine_for(db: str, options: JobsOptions | None = None) -> Engine:
    """The engine for the database alias ``db``, bound to a backend's ``options``."""
    engine: type[Engine] = engine_class(vendor(db))
    return engine(db, options)
