"""Shared set-up for the benchmarks: a throwaway database, Django, timing and tables."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The PostgreSQL server of the --db postgres runs; it needs pgvector. bench/run_all.py
# sets it to a throwaway server with the extension when the machine's has none.
PG_SERVER = os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432").rstrip("/")
PG_ADMIN_URL = f"{PG_SERVER}/postgres"
PG_BENCH_URL = f"{PG_SERVER}/bench"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    return p


def postgres_offers_pgvector() -> bool:
    try:
        import psycopg

        with psycopg.connect(PG_ADMIN_URL, connect_timeout=2) as conn:
            return conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'").fetchone() is not None
    except Exception:
        return False


def _recreate_postgres(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def setup_django(name: str, db: str) -> str:
    """Point Django at a fresh throwaway database, migrate it, return a label."""
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-any-deployment-0123456789")
    if db == "sqlite":
        path = Path(f"/tmp/bench-{name}.sqlite3")
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    else:
        _recreate_postgres("bench")
        os.environ["DATABASE_URL"] = PG_BENCH_URL
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from django.db import connection

    if db == "sqlite":
        return "SQLite " + ".".join(map(str, connection.Database.sqlite_version_info))  # type: ignore[attr-defined]
    version = int(connection.pg_version)  # type: ignore[attr-defined]
    return f"PostgreSQL {version // 10000}.{version % 10000}"


def time_calls(fn: Callable[[], object], n: int) -> list[float]:
    """Wall time of each of ``n`` calls, in seconds."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def pct(samples: Sequence[float], q: float) -> float:
    s = sorted(samples)
    if not s:
        return float("nan")
    k = min(len(s) - 1, max(0, round(q / 100 * (len(s) - 1))))
    return s[k]


def p50(samples: Sequence[float]) -> float:
    return statistics.median(samples)


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]], notes: Sequence[str] = ()) -> str:
    def fmt(v: object) -> str:
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.0f}"
        return str(v)

    lines = [f"### {title}", "", "| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    if notes:
        lines.append("")
        lines += [f"- {n}" for n in notes]
    text = "\n".join(lines) + "\n"
    print(text, flush=True)
    return text
