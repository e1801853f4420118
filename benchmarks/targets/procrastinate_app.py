"""The Procrastinate app the workers load (plain, psycopg connector)."""

from __future__ import annotations

import os

import procrastinate

from benchmarks.targets import plain

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["BENCH_DATABASE_URL"])
)
noop = app.task(name="noop")(plain.noop)
probe = app.task(name="probe")(plain.probe)
