"""PostgreSQL helpers shared by every peer: per-peer databases, DSNs, and row cloning."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import psycopg

SERVER = os.environ.get("BENCH_PG", "postgres://root@127.0.0.1:5432")


def dsn(dbname: str) -> str:
    return f"{SERVER}/{dbname}"


def connect(dbname: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn(dbname), autocommit=True)


def create_database(name: str) -> None:
    """Drop and recreate ``name`` so every run starts from an empty database."""
    drop_database(name)
    with connect("postgres") as conn:
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(name: str) -> None:
    with connect("postgres") as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name]
        )
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


def execute(dbname: str, sql: str, params: Sequence[Any] | None = None) -> list[tuple[Any, ...]]:
    with connect(dbname) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def scalar(dbname: str, sql: str, params: Sequence[Any] | None = None) -> Any:
    rows = execute(dbname, sql, params)
    return rows[0][0] if rows else None


def vacuum(dbname: str, *tables: str) -> None:
    with connect(dbname) as conn:
        for table in tables:
            conn.execute(f"VACUUM ANALYZE {table}")


def clone_rows(dbname: str, table: str, copies: int, where: str = "TRUE") -> None:
    """Insert ``copies`` copies of the one row of ``table`` matching ``where``.

    The primary key is left to its default (serial, identity) or made anew
    (uuid, text): the copies are rows the peer itself wrote, not a guess at
    its schema.
    """
    with connect(dbname) as conn:
        columns = conn.execute(
            "SELECT column_name, data_type, coalesce(column_default, nullif(is_identity, 'NO')) "
            "FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
            [table],
        ).fetchall()
        pk = conn.execute(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = %s::regclass AND i.indisprimary",
            [table],
        ).fetchall()
        pk_names = {row[0] for row in pk}
        names: list[str] = []
        values: list[str] = []
        for name, data_type, default in columns:
            if name in pk_names:
                if default is not None:
                    continue
                names.append(f'"{name}"')
                if data_type == "uuid":
                    values.append("gen_random_uuid()")
                elif data_type in ("bigint", "integer"):
                    values.append(f'(SELECT coalesce(max("{name}"), 0) FROM {table}) + g')
                else:
                    values.append("md5(random()::text || g::text)")
                continue
            names.append(f'"{name}"')
            values.append(f'"{name}"')
        conn.execute(
            f"INSERT INTO {table} ({', '.join(names)}) "
            f"SELECT {', '.join(values)} FROM "
            f"(SELECT * FROM {table} WHERE {where} LIMIT 1) AS src, "
            f"generate_series(1, %s) AS g",
            [copies],
        )
