"""Run the Procfile's processes under supervisord, each restarted whenever it exits.

``make up-prod`` runs this. (honcho, which it ran before, stops every process as soon as
one dies.) supervisord restarts a process that exited, a second later; one that keeps
dying within STARTED_AFTER_SECONDS of its start waits 1, 2, 3, ... seconds longer each
time. Its log says why (``exited: worker (terminated by SIGKILL; not expected)``), the
other processes keep running, and SIGTERM or Ctrl-C stops them all: SIGTERM to each
process group, SIGKILL after the process's grace period.

    python deploy/supervise.py [--procfile Procfile] [--dir var/supervisor]

Writes ``<dir>/supervisord.conf`` and replaces itself with supervisord, in the
foreground. The processes inherit this environment and run through ``/bin/sh``, so
``${PORT:-8000}`` in the Procfile expands as it did under honcho; their output goes to
this process's standard output. Standard library only: it runs before Django is set up.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# A process that stays up this long has started; one that dies sooner is retried with a
# growing delay, and after this many such tries in a row supervisord gives up on it.
STARTED_AFTER_SECONDS = 5
START_RETRIES = 1000
# Seconds between SIGTERM and SIGKILL when stopping. The worker's running phases see the
# stop flag and hand their work back (as docker-compose.yml's stop_grace_period).
STOP_GRACE_SECONDS = {"worker": 30}
DEFAULT_STOP_GRACE_SECONDS = 10

PROCFILE_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")


def read_procfile(path: Path) -> dict[str, str]:
    """``name: command`` lines, in order; comments and blank lines skipped."""
    processes: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = PROCFILE_LINE.match(line)
        if match is None:
            raise ValueError(f"{path}:{number}: expected 'name: command', got {line!r}")
        name, command = match.groups()
        if name in processes:
            raise ValueError(f"{path}:{number}: process {name!r} is defined twice")
        processes[name] = command
    if not processes:
        raise ValueError(f"{path}: no processes")
    return processes


def supervisord_config(processes: dict[str, str], *, workdir: Path, directory: Path = ROOT) -> str:
    """supervisord's configuration for ``processes``; its pid file goes to ``workdir``."""

    def value(text: str) -> str:
        # The file is read with %(name)s interpolation: a literal % is written %%.
        return text.replace("%", "%%")

    lines = [
        "; Written by deploy/supervise.py from the Procfile; edits here are overwritten.",
        "[supervisord]",
        "nodaemon=true",
        # In the foreground supervisord also logs to its standard output: no log file.
        "logfile=/dev/null",
        "logfile_maxbytes=0",
        f"pidfile={value(str(workdir / 'supervisord.pid'))}",
    ]
    for name, command in processes.items():
        # exec: the shell expands ${VAR:-default} and is replaced by the program, so
        # signals reach the program itself.
        shell_command = shlex.join(["/bin/sh", "-c", f"exec {command}"])
        lines += [
            "",
            f"[program:{name}]",
            f"command={value(shell_command)}",
            f"directory={value(str(directory))}",
            "autostart=true",
            "autorestart=true",
            f"startsecs={STARTED_AFTER_SECONDS}",
            f"startretries={START_RETRIES}",
            "stopsignal=TERM",
            f"stopwaitsecs={STOP_GRACE_SECONDS.get(name, DEFAULT_STOP_GRACE_SECONDS)}",
            # The whole process group: a Celery worker's pool processes, say.
            "stopasgroup=true",
            "killasgroup=true",
            "redirect_stderr=true",
            "stdout_logfile=/dev/fd/1",
            "stdout_logfile_maxbytes=0",
        ]
    return "\n".join(lines) + "\n"


def supervisord_executable() -> str:
    """supervisord of the interpreter running this (the project's virtualenv)."""
    beside = Path(sys.executable).parent / "supervisord"
    found = str(beside) if beside.exists() else shutil.which("supervisord")
    if found is None:
        raise SystemExit("supervisord is not installed: pip install -r requirements.txt")
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--procfile", type=Path, default=ROOT / "Procfile")
    parser.add_argument("--dir", type=Path, default=ROOT / "var" / "supervisor", help="where the config is written")
    args = parser.parse_args(argv)
    try:
        processes = read_procfile(args.procfile)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"supervise: {exc}") from None
    workdir = args.dir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "supervisord.conf"
    config.write_text(supervisord_config(processes, workdir=workdir, directory=args.procfile.resolve().parent))
    executable = supervisord_executable()
    sys.stdout.flush()
    os.execv(executable, [executable, "--nodaemon", "--configuration", str(config)])  # noqa: S606 - no shell wanted


if __name__ == "__main__":
    main()
