"""Run every benchmark (SQLite and, when it answers, PostgreSQL) and write bench/RESULTS.md.

``--only bench_x.py`` runs one script and puts its sections into the RESULTS.md already
there in place of its old ones (or after the others), leaving every other section and the
machine description as they were, with a line saying what was re-run, when and at what load.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import re
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import postgres_offers_pgvector

HERE = Path(__file__).resolve().parent
BENCHES = [
    "bench_board.py",
    "bench_context.py",
    "bench_events.py",
    "bench_concurrency.py",
    "bench_worker_cpu.py",
    "bench_memory_search.py",
    "bench_memory_retrieval.py",
    "bench_pipeline.py",
    "bench_coder_edits.py",
    "bench_context_editing.py",
    "bench_git_confinement.py",
    "bench_environments.py",
]
PACKAGES = [
    "Django",
    "djangorestframework",
    "celery",
    "numpy",
    "psycopg",
    "channels",
    "channels-redis",
    "daphne",
]


def machine(load: tuple[float, float, float]) -> str:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    versions = []
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions.append(f"{name} {metadata.version(name)}")
    return "\n".join(
        [
            f"- Date: {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}",
            f"- CPU: {cpu}, {os.cpu_count()} cores",
            f"- RAM: {ram}",
            f"- OS: {platform.platform()}",
            f"- Python {platform.python_version()}; {', '.join(versions)}",
            f"- Load average at start (1/5/15 min): {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}",
        ]
    )


# The line that ends each script's section in RESULTS.md.
SECTION_END = re.compile(r"^_(bench_\w+\.py) --db (\w+)[^\n]*: \d+ s_$", re.MULTILINE)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--only", choices=BENCHES, help="run this script alone and merge its sections into RESULTS.md")
    p.add_argument(
        "--args",
        default="",
        help='with --only: more arguments for the script (e.g. "--sizes 200000"), kept in the note',
    )
    args = p.parse_args()
    stop_postgres = ""
    if not os.environ.get("BENCH_PG_SERVER") and not postgres_offers_pgvector():
        # Memory search needs pgvector: a throwaway server with it, as CI's (.ci/run).
        started_pg = subprocess.run(
            [str(HERE.parent / ".ci" / "postgres-with-pgvector"), sys.executable], capture_output=True, text=True
        )
        if started_pg.returncode == 0:
            found = dict(line.split("=", 1) for line in started_pg.stdout.splitlines() if "=" in line)
            os.environ["BENCH_PG_SERVER"] = found["DATABASE_URL"].rsplit("/", 1)[0]
            stop_postgres = started_pg.stdout
            print(f"== PostgreSQL with pgvector at {os.environ['BENCH_PG_SERVER']}", flush=True)
        else:
            print(f"== no PostgreSQL with pgvector: {started_pg.stderr.strip()}", flush=True)
    try:
        return run(args)
    finally:
        if stop_postgres:
            subprocess.run(["bash", "-c", 'eval "$1" && eval "$PGVECTOR_STOP"', "_", stop_postgres], check=False)


def run(args: argparse.Namespace) -> int:
    databases = ["sqlite"] + (["postgres"] if os.environ.get("BENCH_PG_SERVER") or postgres_offers_pgvector() else [])
    extra = shlex.split(args.args) if args.only else []
    sections: list[str] = []
    failures = 0
    started = time.perf_counter()
    load = os.getloadavg()
    began = datetime.datetime.now(datetime.UTC)
    for bench in [args.only] if args.only else BENCHES:
        for db in databases:
            print(f"== {bench} --db {db}", flush=True)
            t0 = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, str(HERE / bench), "--db", db, *extra],
                cwd=HERE.parent,
                capture_output=True,
                text=True,
            )
            took = time.perf_counter() - t0
            if proc.returncode == 0:
                print(proc.stdout, flush=True)
                sections.append(proc.stdout.strip() + f"\n\n_{' '.join([bench, '--db', db, *extra])}: {took:.0f} s_\n")
            else:
                failures += 1
                tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
                print(tail, flush=True)
                sections.append(f"### {bench} --db {db}: FAILED (exit {proc.returncode})\n\n```\n{tail}\n```\n")
    total = time.perf_counter() - started
    if args.only:
        merge(args.only, sections, load, " ".join(extra), began)
        return 1 if failures else 0
    if "postgres" not in databases:
        sections.append("PostgreSQL: not measured (no server with pgvector could be reached or started).\n")
    text = (
        "# Benchmark results\n\n"
        "Written by `make bench` (bench/run_all.py). Each table carries its own baseline, measured in the "
        "same run; see bench/README.md for what each one measures.\n\n"
        "## Machine\n\n"
        f"{machine(load)}\n- Total `make bench` time: {total:.0f} s\n\n"
        "## Results\n\n" + "\n".join(sections)
    )
    (HERE / "RESULTS.md").write_text(text)
    print(f"Wrote {HERE / 'RESULTS.md'} in {total:.0f} s", flush=True)
    return 1 if failures else 0


def merge(
    bench: str,
    sections: list[str],
    load: tuple[float, float, float],
    arguments: str = "",
    began: datetime.datetime | None = None,
) -> None:
    """Put ``bench``'s new ``sections`` into RESULTS.md in place of its old ones."""
    path = HERE / "RESULTS.md"
    text = path.read_text()
    head, marker, body = text.partition("## Results\n\n")
    if not marker:
        raise SystemExit(f"{path} has no '## Results' heading: run the whole of make bench first.")
    old: list[tuple[str, str]] = []  # (script, section text)
    start = 0
    for match in SECTION_END.finditer(body):
        old.append((match.group(1), body[start : match.end()].strip() + "\n"))
        start = match.end()
    trailer = body[start:].strip()
    kept = [section for script, section in old if script != bench]
    first = next((i for i, (script, _) in enumerate(old) if script == bench), len(kept))
    merged = kept[:first] + sections + kept[first:]
    note = (
        f"- Re-run alone since (`bench/run_all.py --only {bench}`{f' with `{arguments}`' if arguments else ''}): "
        f"{began or datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}, load average at start "
        f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f}\n"
    )
    # With or without arguments: the earlier run's line goes.
    head = re.sub(rf"- Re-run alone since \(`bench/run_all.py --only {re.escape(bench)}`[ )].*\n", "", head)
    # At the end of the machine's section, before any section that follows it.
    machine_part, heading, rest = _split_machine(head)
    head = machine_part.rstrip("\n") + "\n" + note + heading + rest
    path.write_text(head + marker + "\n".join(merged) + (f"\n{trailer}\n" if trailer else ""))
    print(f"Merged {bench} into {path}", flush=True)


def _split_machine(head: str) -> tuple[str, str, str]:
    """``head`` as the machine's section (up to its end), the next heading's start, and
    the rest."""
    start = head.find("## Machine")
    end = head.find("\n## ", start + 1) if start >= 0 else -1
    if end < 0:
        return head, "\n", ""
    return head[:end], "\n\n", head[end + 1 :].lstrip("\n")


if __name__ == "__main__":
    raise SystemExit(main())
