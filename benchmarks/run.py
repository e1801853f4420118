"""The benchmark, in one command, from the repository root:

    python -m benchmarks.run [--quick] [--runs 3] [--only django-jobs,celery] [--workloads w2]

Creates ``benchmarks/.venv`` (the same Python as the one running this, with
the peers pinned in ``benchmarks/requirements.txt`` and django-jobs installed
editable), then re-runs itself there. Each run starts one driver process per
peer (``benchmarks.driver``) on a database of its own, made and dropped here;
runs are interleaved (run 1: every peer, run 2: every peer, ...) so drift
hits every peer alike. Writes ``benchmarks/results/latest.json`` (summary),
``benchmarks/results/latest.md`` (the table) and every raw result to
``benchmarks/results/raw/``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
VENV = BENCH / ".venv"
RESULTS = BENCH / "results"
PEERS = [
    "django-jobs",
    "procrastinate",
    "django-tasks-db",
    "django-ox",
    "django-q2",
    "celery",
    "pgqueuer",
]


def venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv() -> None:
    """Create benchmarks/.venv and install the pinned peers, unless already done."""
    requirements = BENCH / "requirements.txt"
    stamp = VENV / ".requirements-stamp"
    want = requirements.read_text() + (ROOT / "pyproject.toml").read_text()
    if stamp.exists() and stamp.read_text() == want:
        return
    if not venv_python().exists():
        print(f"bench: creating {VENV} with {sys.version.split()[0]}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    print("bench: installing the peers (pinned) and django-jobs (editable)", flush=True)
    pip = [str(venv_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-e", f"{ROOT}[binary]", "-r", str(requirements)], check=True)
    stamp.write_text(want)


def at_least_one(text: str) -> int:
    """An argument that counts something: a whole number, at least 1."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def ensure_redis() -> None:
    try:
        ok = subprocess.run(["redis-cli", "ping"], capture_output=True, text=True, timeout=5)
        if ok.stdout.strip() == "PONG":
            return
    except (OSError, subprocess.TimeoutExpired):
        pass
    print("bench: starting redis-server on 127.0.0.1:6379", flush=True)
    argv = [
        "--daemonize",
        "yes",
        "--bind",
        "127.0.0.1",
        "-::1",
        "--port",
        "6379",
        "--appendonly",
        "no",
    ]
    argv += ["--save", "", "--dir", "/var/lib/redis", "--logfile", "/var/log/redis/ci.log"]
    subprocess.run(["redis-server", *argv], check=False)


def run_driver(peer: str, run: int, options: argparse.Namespace, raw: Path) -> dict[str, Any]:
    db = f"bench_{peer.replace('-', '_')}"
    argv = [str(venv_python()), "-m", "benchmarks.driver", "--peer", peer, "--db", db]
    argv += ["--create-db", "--only", options.workloads]
    if options.quick:
        argv.append("--quick")
    if options.backlog is not None:
        argv += ["--backlog", str(options.backlog)]
    log = raw / f"run{run}-{peer}.log"
    started = time.monotonic()
    with log.open("w") as stderr:
        done = subprocess.run(
            argv,
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=options.peer_timeout,
        )
    took = time.monotonic() - started
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        tail = log.read_text(errors="replace")[-1500:]
        print(f"bench: run {run} {peer} FAILED after {took:.0f}s; see {log}", flush=True)
        return {"peer": peer, "errors": {"driver": tail}, "versions": {}, "settings": {}}
    result: dict[str, Any] = json.loads(lines[-1])
    (raw / f"run{run}-{peer}.json").write_text(json.dumps(result, indent=2))
    print(f"bench: run {run} {peer} done in {took:.0f}s; errors: {result['errors'] or 'none'}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a tenth of the sizes")
    parser.add_argument("--only", default=",".join(PEERS), help="comma-separated peers")
    parser.add_argument("--workloads", default="w1,w2,w3,w4")
    parser.add_argument(
        "--backlog",
        type=at_least_one,
        help="W4: finished jobs already in the table (default 200,000)",
    )
    parser.add_argument("--peer-timeout", type=float, default=3600)
    parser.add_argument("--no-venv", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if not options.no_venv:
        ensure_venv()
        argv = [str(venv_python()), "-m", "benchmarks.run", *sys.argv[1:], "--no-venv"]
        os.execve(argv[0], argv, {**os.environ, "PYTHONPATH": str(ROOT)})
    ensure_redis()
    from benchmarks.report import summarize, to_markdown

    peers = [p.strip() for p in options.only.split(",") if p.strip()]
    raw = RESULTS / "raw" / time.strftime("%Y%m%d-%H%M%S")
    raw.mkdir(parents=True, exist_ok=True)
    runs: list[list[dict[str, Any]]] = []
    for run in range(1, options.runs + 1):
        runs.append([run_driver(peer, run, options, raw) for peer in peers])
        summary = summarize(runs)  # rewritten after every run, so a cut-short sitting counts
        meta = {
            "at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "runs": len(runs),
            "quick": options.quick,
            "backlog": options.backlog,
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "postgres": _server_version(),
            "postgres_settings": _server_settings(),
        }
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "latest.json").write_text(json.dumps({"meta": meta, **summary}, indent=2))
        (RESULTS / "latest.md").write_text(to_markdown(summary))
        (raw / "runs.json").write_text(json.dumps(runs, indent=2))
    print((RESULTS / "latest.md").read_text())


def _server_version() -> str:
    from benchmarks import pg

    try:
        return str(pg.scalar("postgres", "SHOW server_version"))
    except Exception as exc:
        return f"unknown ({exc})"


def _server_settings() -> dict[str, str]:
    """The server's non-default settings (autovacuum, fsync, shared_buffers...)."""
    from benchmarks import pg

    try:
        rows = pg.execute(
            "postgres",
            "SELECT name, setting FROM pg_settings WHERE source = 'configuration file' "
            "AND name NOT LIKE 'lc\\_%%' AND name NOT LIKE 'log\\_%%'",
        )
    except Exception:
        return {}
    return {name: value for name, value in rows}


if __name__ == "__main__":
    main()
