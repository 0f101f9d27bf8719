"""The sandbox as an attacker sees it: each test is an escape attempt that must fail.

A hostile test command (or agent-written code inside it) tries to read the database
file, a server process's environment, another repository, a unix socket, a file
outside its worktree, and the network; to leave a setuid file or a fake ``.git``
behind; to fork without end; to learn the server's paths from bwrap's command line;
to use more memory, processes or disk than its limits by spreading over several
processes or files. And where no sandbox can be made, nothing runs.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from core import sandbox_limits
from core.exceptions import SandboxUnavailable
from core.health import check_sandbox
from core.sandbox import SANDBOX_DISABLED_WARNING, limits_from_settings
from core.sandbox_accounts import storage_ids
from core.sandbox_cgroups import CGROUP_PREFIX, CgroupSupport, cgroup_support
from core.sandbox_limits import DISK_LIMIT_EXCEEDED, MEMORY_LIMIT_EXCEEDED, PROCESS_LIMIT_REACHED, limits_enforcement
from core.sandbox_probe import BWRAP_MISSING, sandbox_status
from core.workers import forget_worker_heartbeat, record_worker_heartbeat
from repos.verify import VerifyResult, run_test_command

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(
    BWRAP is None, reason="bubblewrap is not installed (apt-get install bubblewrap); .ci/run installs it"
)
SECRET = "s3cr3t-4b1d-the-sandbox-must-not-see"


@pytest.fixture
def area(tmp_path: Path, settings) -> Path:
    """WORKTREES_ROOT with one worktree in it, and secrets beside it."""
    settings.WORKTREES_ROOT = str(tmp_path / "worktrees")
    settings.REPOS_ROOT = str(tmp_path / "repos")
    worktree = tmp_path / "worktrees" / "task-1-run-1"
    worktree.mkdir(parents=True)
    (worktree / ".git").write_text(f"gitdir: {tmp_path}/repos/mine/.git/worktrees/task-1-run-1\n")
    (worktree / "app.py").write_text("print('hello')\n")
    other = tmp_path / "repos" / "someone-elses"
    other.mkdir(parents=True)
    (other / "secrets.py").write_text(f"KEY = '{SECRET}'\n")
    (tmp_path / "worktrees" / "task-2-run-1").mkdir()
    (tmp_path / "worktrees" / "task-2-run-1" / "theirs.txt").write_text(SECRET)
    (tmp_path / "db.sqlite3").write_text(SECRET)
    for path in (tmp_path / "db.sqlite3", other / "secrets.py"):
        path.chmod(0o644)  # readable by anyone on the host: only the sandbox keeps it out
    sandbox_status(refresh=True)
    return worktree


def sandbox_health() -> dict[str, object]:
    """/healthz's sandbox check as this topology makes it: this process is the worker
    (embedded), or a worker says it in its heartbeat (production)."""
    if settings.EMBEDDED:
        return check_sandbox()
    record_worker_heartbeat("sandbox-test@host")
    try:
        return check_sandbox()
    finally:
        forget_worker_heartbeat("sandbox-test@host")


def run(worktree: Path, command: str, **limits: int) -> VerifyResult:
    return run_test_command(
        command=command,
        cwd=worktree,
        timeout=30,
        limits=dataclasses.replace(limits_from_settings(), **limits),
        max_output_chars=200_000,
        on_output=lambda text: None,
        should_cancel=lambda: False,
    )


@needs_bwrap
def test_the_command_runs_in_its_worktree_as_an_unprivileged_user(area: Path) -> None:
    result = run(area, "id -u; id -g; pwd; cat app.py; echo made > made.txt; touch /usr/x 2>&1; echo uid-done")
    lines = result.output.splitlines()
    assert result.sandboxed and result.network_isolated
    assert lines[:4] == ["65534", "65534", "/workspace", "print('hello')"]
    assert "Read-only file system" in result.output and "uid-done" in result.output
    made = area / "made.txt"
    # Written in the worktree, and the storage account's (the server's own when it is
    # not root) afterwards: not the command's, whose uid the next command may get.
    assert made.read_text() == "made\n"
    assert made.stat().st_uid == (storage_ids() or (os.geteuid(),))[0]


@needs_bwrap
def test_no_database_file_no_other_repository_no_file_outside_the_worktree(area: Path, settings) -> None:
    root = area.parent.parent
    database = connection.settings_dict["NAME"]
    targets = [
        str(root / "db.sqlite3"),
        str(root / "repos" / "someone-elses" / "secrets.py"),
        str(root / "worktrees" / "task-2-run-1" / "theirs.txt"),
        "../task-2-run-1/theirs.txt",
        str(database),
        "/etc/shadow",
    ]
    script = "; ".join(f"cat '{target}' 2>&1" for target in targets)
    # Everything the sandbox can see but the system's toolchains (/usr, and /bin, /lib…
    # where they are symlinks into it), its own /proc and /dev.
    search = (
        f"grep -rl {SECRET} $(find / -mindepth 1 -maxdepth 1 -not -type l | grep -vE '^/(usr|proc|dev)$') 2>/dev/null"
    )
    result = run(area, f"{script}; ls {root} {settings.REPOS_ROOT} 2>&1; {search}; echo end")
    assert SECRET not in result.output
    assert result.output.count("No such file or directory") >= len(targets)
    assert "end" in result.output


@needs_bwrap
def test_no_server_process_and_no_environment_of_one(area: Path, monkeypatch) -> None:
    monkeypatch.setenv("AUTOCODER_TEST_SECRET", SECRET)
    monkeypatch.setenv("SECRET_KEY", SECRET)
    helper = subprocess.Popen(["sleep", "30"], env={"HELPER_SECRET": SECRET})  # a server process
    try:
        result = run(
            area,
            "ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/1/environ | wc -c; "
            f"cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; cat /proc/{os.getpid()}/environ 2>&1; "
            f"cat /proc/{helper.pid}/environ 2>&1; env",
        )
    finally:
        helper.kill()
        helper.wait()
    assert SECRET not in result.output
    processes, bwrap_environment = (int(value) for value in result.output.splitlines()[:2])
    assert processes < 10  # bwrap, the shell and its pipeline: nothing of the host's
    assert bwrap_environment == 0  # bwrap was started from an empty environment
    assert "DJANGO_SETTINGS_MODULE" not in result.output and "CI=true" in result.output


@needs_bwrap
def test_no_unix_socket_and_no_network(area: Path) -> None:
    socket_path = area.parent.parent / "server.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(socket_path))
    socket_path.chmod(0o777)
    listener.listen()
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind("\0autocoder-test-abstract")
    abstract.listen()
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen()
    targets = [
        (socket.AF_UNIX, str(socket_path)),
        (socket.AF_UNIX, "\0autocoder-test-abstract"),
        (socket.AF_UNIX, "/var/run/postgresql/.s.PGSQL.5432"),
        (socket.AF_INET, ("127.0.0.1", tcp.getsockname()[1])),
        (socket.AF_INET, ("127.0.0.1", 5432)),
        (socket.AF_INET, ("127.0.0.1", 6379)),
    ]
    probe = (
        "import socket\n"
        f"for family, address in {[(int(family), address) for family, address in targets]!r}:\n"
        "    s = socket.socket(family)\n"
        "    s.settimeout(2)\n"
        "    try:\n"
        "        s.connect(address)\n"
        "        print('CONNECTED', address)\n"
        "    except OSError as exc:\n"
        "        print('refused', type(exc).__name__)\n"
    )
    (area / "probe.py").write_text(probe)
    try:
        result = run(area, "python3 probe.py")
    finally:
        for server in (listener, abstract, tcp):
            server.close()
    assert "CONNECTED" not in result.output
    assert result.output.count("refused") == 6, result.output


@needs_bwrap
def test_setuid_files_and_a_fake_git_folder_do_not_survive_the_command(area: Path) -> None:
    pointer = (area / ".git").read_text()
    command = (
        "cp /usr/bin/true escalate && chmod 6755 escalate && ls -l escalate; "
        "rm .git && mkdir -p .git/hooks && printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > .git/config; "
        "echo done"
    )
    result = run(area, command)
    assert "rwsr-sr-x" in result.output and "done" in result.output  # it did try
    mode = (area / "escalate").stat().st_mode
    assert not mode & (stat.S_ISUID | stat.S_ISGID)
    assert (area / "escalate").stat().st_uid == (storage_ids() or (os.geteuid(),))[0]
    assert (area / ".git").is_file() and (area / ".git").read_text() == pointer


@needs_bwrap
def test_the_worktrees_git_pointer_names_no_server_path_and_cannot_be_replaced(area: Path, tmp_path: Path) -> None:
    pointer = (area / ".git").read_text()
    result = run(
        area, "cat .git; ln .git linked 2>&1; rm -f .git 2>&1; echo x > .git 2>&1; cat /proc/1/cmdline; echo done"
    )
    assert "done" in result.output and "gitdir: " in result.output
    assert str(tmp_path) not in result.output
    assert (area / ".git").read_text() == pointer and os.lstat(area / ".git").st_nlink == 1
    assert not (area / "linked").exists() or str(tmp_path) not in (area / "linked").read_text()


@needs_bwrap
def test_limits_hold_processes_tmp_and_memory(area: Path) -> None:
    forks = run(area, "for i in $(seq 200); do sleep 5 & done 2>&1 | tail -1; echo forked", processes=32)
    assert "Resource temporarily unavailable" in forks.output or "Cannot fork" in forks.output
    tmp = run(area, "dd if=/dev/zero of=/tmp/fill bs=1M count=40 2>&1", tmp_size_mb=16)
    assert "No space left on device" in tmp.output
    hog = run(area, "python3 -c \"b = bytearray(1024 * 1024 * 1024); print('allocated')\"", memory_mb=256)
    assert not hog.passed and "allocated" not in hog.output
    if cgroup_support().parent("memory") is not None:
        assert MEMORY_LIMIT_EXCEEDED.format(mb=256) in hog.output  # the kernel's OOM killer, then the command
    else:
        assert "MemoryError" in hog.output  # RLIMIT_AS


# --- Limits for the command as a whole -------------------------------------------------


def host_can_make_cgroup(controller: str) -> bool:
    """Independently of core.sandbox_limits: can this process make a child cgroup with
    ``controller`` under its own (v1 at /sys/fs/cgroup/<controller>, v2 at
    /sys/fs/cgroup or /sys/fs/cgroup/unified)? Where it can, the sandbox must use it."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, own = line.split(":", 2)
        if controllers == "":
            places = [Path("/sys/fs/cgroup", own.lstrip("/")), Path("/sys/fs/cgroup/unified", own.lstrip("/"))]
            places = [p for p in places if controller in _read(p / "cgroup.controllers").split()]
        elif controller in controllers.split(","):
            places = [Path("/sys/fs/cgroup", controller, own.lstrip("/"))]
        else:
            continue
        for place in places:
            child = place / f"oracle-{os.getpid()}"
            try:
                child.mkdir()
            except OSError:
                continue
            child.rmdir()
            return True
    return False


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


THREE_HOGS = """
import os, signal
ready_r, ready_w = os.pipe()
children = []
for n in range(3):
    child = os.fork()
    if child == 0:
        block = b"\\1" * (60 * 1024 * 1024)  # every page written
        os.write(ready_w, b"x")
        signal.pause()
    children.append(child)
os.close(ready_w)
got = b""
while len(got) < 3:
    more = os.read(ready_r, 3)
    if not more:
        break
    got += more
if len(got) == 3 and all(os.waitpid(child, os.WNOHANG) == (0, 0) for child in children):
    print("three allocated at once", flush=True)
    for child in children:
        os.kill(child, signal.SIGKILL)
else:
    print("a child was killed; waiting to be stopped", flush=True)
    signal.pause()
"""


@needs_bwrap
def test_memory_is_limited_for_the_command_as_a_whole(area: Path) -> None:
    memory = cgroup_support(refresh=True).parent("memory")
    assert (memory is not None) == host_can_make_cgroup("memory")
    report = limits_enforcement()["memory"]
    if memory is None:
        # No cgroup here: the fallback is today's per-process rlimit, and /healthz says so.
        assert report["per"] == "process" and report["by"] == "rlimit RLIMIT_AS" and report["why_not_per_command"]
        return
    assert report["per"] == "command" and report["by"] == f"cgroup v{memory.version} memory"
    (area / "hogs.py").write_text(THREE_HOGS)
    result = run(area, "python3 hogs.py", memory_mb=100)
    # Three processes of 60 MB each under 100 MB: not three at once, and the command stopped.
    assert "three allocated at once" not in result.output
    assert not result.passed and not result.timed_out
    assert MEMORY_LIMIT_EXCEEDED.format(mb=100) in result.output
    # The command's cgroup is gone with it.
    assert not [name for name in os.listdir(memory.path) if name.startswith(f"{CGROUP_PREFIX}{os.getpid()}-")]


@needs_bwrap
def test_without_cgroups_the_rlimits_hold_and_health_says_so(area: Path, monkeypatch) -> None:
    none = CgroupSupport(parents={}, reasons=dict.fromkeys(("memory", "pids"), "no cgroup filesystem is mounted"))
    monkeypatch.setattr(sandbox_limits, "cgroup_support", lambda **_: none)
    report = limits_enforcement()
    assert report["memory"]["per"] == "process" and report["memory"]["by"] == "rlimit RLIMIT_AS"
    assert report["processes"]["by"] == "rlimit RLIMIT_NPROC"
    assert report["memory"]["why_not_per_command"] == "no cgroup filesystem is mounted"
    hog = run(area, "python3 -c \"b = bytearray(1024 * 1024 * 1024); print('allocated')\"", memory_mb=256)
    assert not hog.passed and "MemoryError" in hog.output and "allocated" not in hog.output
    forks = run(area, "for i in $(seq 200); do sleep 5 & done 2>&1 | tail -1; echo forked", processes=32)
    assert "Resource temporarily unavailable" in forks.output or "Cannot fork" in forks.output


@needs_bwrap
def test_the_process_limit_is_the_commands_own(area: Path, settings) -> None:
    pids = cgroup_support(refresh=True).parent("pids")
    assert (pids is not None) == host_can_make_cgroup("pids")
    if pids is None:
        assert limits_enforcement()["processes"]["per"] == "account (SANDBOX_UID)"
        return
    # Forty processes of the sandbox's account elsewhere on the host (another command's):
    # with a per-account rlimit of 32 this command could not start one.
    account = {"user": settings.SANDBOX_UID, "group": settings.SANDBOX_GID} if os.geteuid() == 0 else {}
    others = [subprocess.Popen(["sleep", "60"], **account) for _ in range(40)]
    try:
        result = run(area, "for i in $(seq 10); do sleep 0.1 & done; wait; echo ten ran", processes=32)
    finally:
        for other in others:
            other.kill()
            other.wait()
    assert result.passed and "ten ran" in result.output, result.output
    forks = run(area, "for i in $(seq 200); do sleep 5 & done 2>&1 | tail -1; echo forked", processes=32)
    assert "Cannot fork" in forks.output or "Resource temporarily unavailable" in forks.output
    assert PROCESS_LIMIT_REACHED.format(count=32) in forks.output


@needs_bwrap
def test_disk_is_limited_for_the_command_as_a_whole(area: Path) -> None:
    # Six files of 1 MB, each under the file-size limit, together over the disk limit.
    command = (
        "for i in 1 2 3 4 5 6; do dd if=/dev/urandom of=blob$i bs=1M count=1 2>/dev/null; done; "
        "echo wrote six; sleep 25; echo still running"
    )
    result = run(area, command, disk_mb=5, file_size_mb=2)
    assert "wrote six" in result.output
    assert not result.passed and not result.timed_out
    assert DISK_LIMIT_EXCEEDED.format(mb=5) in result.output and "still running" not in result.output
    # Written quickly and gone before the watcher looked: still over, still a failure.
    quick = run(area, "dd if=/dev/urandom of=big bs=1M count=7 2>/dev/null; echo done", disk_mb=5, file_size_mb=8)
    assert not quick.passed and DISK_LIMIT_EXCEEDED.format(mb=5) in quick.output
    under = run(area, "rm -f blob* big; dd if=/dev/urandom of=small bs=1M count=3 2>/dev/null; echo ok", disk_mb=5)
    assert under.passed and "limit exceeded" not in under.output


@needs_bwrap
def test_pid_1s_command_line_names_no_server_path(area: Path, settings) -> None:
    result = run(area, "tr '\\0' '\\n' < /proc/1/cmdline; echo; cat /proc/1/cmdline | wc -c")
    assert result.passed and result.output.splitlines()[0] == BWRAP
    for path in (str(area), settings.WORKTREES_ROOT, settings.REPOS_ROOT, "autocoder-sandbox-", "--bind", "--setenv"):
        assert path not in result.output, path


@needs_bwrap
def test_commands_start_without_preexec_fn_and_keep_their_rlimits(area: Path, monkeypatch, settings) -> None:
    """preexec_fn is unsafe in a process with threads (the workers run commands from
    threads): every process the sandbox starts — the probe, a command, an unsandboxed
    one — starts without it, and the rlimits still hold inside."""
    seen: list[object] = []
    original = subprocess.Popen.__init__

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("preexec_fn"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", spy)
    assert sandbox_status(refresh=True).available
    result = run(area, "grep -E 'Max (cpu time|file size|core file size)' /proc/self/limits", cpu_seconds=77)
    settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = True
    unsandboxed = run(area, "grep -E 'Max cpu time' /proc/self/limits", cpu_seconds=78)
    assert len(seen) >= 3 and all(function is None for function in seen)
    file_size = str(limits_from_settings().file_size_mb * 1024 * 1024)
    # "Max cpu time  77  82  seconds": the name, soft and hard (the name is 3 or 4 words).
    lines = {line.rsplit(None, 3)[0].strip(): line.split()[-3:-1] for line in result.output.splitlines()}
    assert lines["Max cpu time"] == ["77", "82"] and lines["Max file size"] == [file_size, file_size]
    assert lines["Max core file size"] == ["0", "0"]
    assert "78" in unsandboxed.output


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="only a server running as root can give commands uids of their own")
def test_commands_at_the_same_moment_run_as_distinct_uids_and_share_no_process_limit(
    area: Path, tmp_path: Path
) -> None:
    import threading

    other = tmp_path / "worktrees" / "task-2-run-1"
    owners: dict[str, int] = {}
    first = threading.Event()

    def holder() -> None:
        # One user's run keeps 15 of its 20 processes busy for a while.
        def record(text: str) -> None:
            if "holding" in text and not first.is_set():
                owners["first"] = other.stat().st_uid
                first.set()

        owners["result"] = run_test_command(
            command="for i in $(seq 15); do sleep 4 & done; echo holding; wait",
            cwd=other,
            timeout=30,
            limits=dataclasses.replace(limits_from_settings(), processes=20),
            max_output_chars=10_000,
            on_output=record,
            should_cancel=lambda: False,
        )

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert first.wait(20), owners
        # Another user's run, meanwhile, needs 10.
        second = run(
            area, "for i in $(seq 10); do sleep 0.2 & done; wait; stat -c %u /workspace; echo all-forked", processes=20
        )
    finally:
        thread.join()
    assert "all-forked" in second.output and "temporarily unavailable" not in second.output
    assert owners["first"] not in (0, settings.SANDBOX_UID)
    assert owners["first"] >= settings.SANDBOX_UID_POOL_START


def test_without_bwrap_nothing_runs_and_health_says_why(area: Path, settings) -> None:
    settings.SANDBOX_BWRAP = str(area.parent / "no-such-bwrap")
    status = sandbox_status(refresh=True)
    assert not status.available and BWRAP_MISSING in status.message and "apt-get install bubblewrap" in status.message
    with pytest.raises(SandboxUnavailable) as refused:
        run(area, "touch ran.txt")
    assert not (area / "ran.txt").exists()
    assert "Neither git nor test commands run" in refused.value.message
    health = sandbox_health()
    assert health["ok"] is False and BWRAP_MISSING in health["reason"]


def test_where_namespaces_are_refused_nothing_runs(area: Path, settings, tmp_path: Path) -> None:
    # What bwrap says in a container whose seccomp profile refuses user namespaces.
    fake = tmp_path / "bwrap"
    fake.write_text(
        f"#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, see {tmp_path}/secret-path' >&2\nexit 1\n"
    )
    fake.chmod(0o755)
    settings.SANDBOX_BWRAP = str(fake)
    status = sandbox_status(refresh=True)
    assert not status.available and "No permissions to creating new namespace" in status.reason
    assert str(tmp_path) not in status.message  # /healthz is public: no server paths
    with pytest.raises(SandboxUnavailable):
        run(area, "touch ran.txt")
    assert not (area / "ran.txt").exists()


def test_the_operators_opt_out_is_loud(area: Path, settings) -> None:
    settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = True
    settings.SANDBOX_BWRAP = str(area.parent / "no-such-bwrap")
    result = run(area, "echo ran")
    assert result.output.startswith(SANDBOX_DISABLED_WARNING) and "ran" in result.output
    assert result.sandboxed is False and result.network_isolated is False
    health = sandbox_health()
    assert health["ok"] is False and health["disabled"] is True
    assert "UNSAFE_RUN_TESTS_WITHOUT_SANDBOX" in health["reason"]
    # Its commands get rlimits, not cgroups, and no tmpfs: /healthz does not claim more.
    limits = health["limits"]
    assert limits["memory"]["by"] == "rlimit RLIMIT_AS" and limits["processes"]["by"] == "rlimit RLIMIT_NPROC"
    assert "tmp" not in limits


def test_a_command_already_waited_for_is_never_signalled_again(monkeypatch) -> None:
    # Its pid, and the group id it led, may belong to another process by then: pids
    # come round fast where pid_max is 32768 (a supervisor's worker was killed so).
    from core.sandbox import process_kill

    process = subprocess.Popen(["/bin/true"], start_new_session=True)
    process.wait()
    signalled: list[int] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, signal: signalled.append(pgid))
    process_kill(process)
    assert signalled == []
    running = subprocess.Popen(["sleep", "30"], start_new_session=True)
    monkeypatch.undo()
    process_kill(running)  # one still running is ended, with its group
    assert running.returncode == -9
