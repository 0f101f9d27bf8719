"""The sandbox every command of user or agent code runs in (core/sandbox.py)."""

from __future__ import annotations

from ..env import BASE_DIR, env_bool, env_int, env_str

# --- The sandbox (core/sandbox.py) ----------------------------------------------------
# Every command that runs user or agent code (the test command, the Coder's tests) runs
# in bubblewrap: no network, no files but the run's worktree and the system toolchains,
# an unprivileged account. Where it cannot be made, such commands do not run.
SANDBOX_BWRAP = env_str("SANDBOX_BWRAP", "bwrap")
# When the server runs as root, git runs in the sandbox as this account (never root),
# which owns the repositories and worktrees AutoCoder works in; use one that nothing
# else runs as. It must be able to search down to REPOS_ROOT and WORKTREES_ROOT.
SANDBOX_UID = env_int("SANDBOX_UID", default=65534, minimum=1)
SANDBOX_GID = env_int("SANDBOX_GID", default=65534, minimum=1)
# Test commands (and the Claude CLI's agent) run as uids of their own, one per command
# running at the same moment on the host: SANDBOX_UID_POOL_START and the next
# SANDBOX_UID_POOL_SIZE - 1 uids (gid = uid). No account needs to exist for them; none
# may be used by anything else.
SANDBOX_UID_POOL_START = env_int("SANDBOX_UID_POOL_START", default=200_000, minimum=1000)
SANDBOX_UID_POOL_SIZE = env_int("SANDBOX_UID_POOL_SIZE", default=64, minimum=1)
SANDBOX_MAX_PROCESSES = env_int("SANDBOX_MAX_PROCESSES", default=256, minimum=16)
SANDBOX_FILE_SIZE_MB = env_int("SANDBOX_FILE_SIZE_MB", default=1024, minimum=1)
SANDBOX_TMP_SIZE_MB = env_int("SANDBOX_TMP_SIZE_MB", default=512, minimum=16)
# What one command may add to its worktree (on the host's disk; /tmp and home are the
# tmpfs above): watched while it runs, and the command is stopped over it.
SANDBOX_DISK_MB = env_int("SANDBOX_DISK_MB", default=2048, minimum=1)
# A repository's base image (core/sandbox_images.py): its setup and test commands run
# on the image's root filesystem, unpacked here once per manifest digest (with the pulled
# images' layouts), owned by SANDBOX_UID; it must be searchable by the sandbox's accounts.
# Pulling (skopeo) and unpacking (umoci) run confined as SANDBOX_UID, each within the
# timeout. A repository may also name a local OCI layout, `oci:<path>:<tag>`: a path
# relative to IMAGES_LOCAL_ROOT, or an absolute one under it or under REPOS_ROOT.
IMAGES_ROOT = env_str("IMAGES_ROOT", str(BASE_DIR / "var" / "images"))
IMAGES_LOCAL_ROOT = env_str("IMAGES_LOCAL_ROOT", str(BASE_DIR / "var" / "image-layouts"))
IMAGE_PULL_TIMEOUT_SECONDS = env_int("IMAGE_PULL_TIMEOUT_SECONDS", default=900, minimum=10)
# The operator's explicit, unsafe way out where no sandbox can be made: test commands
# then run as the server's own user and can read everything it can.
UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = env_bool("UNSAFE_RUN_TESTS_WITHOUT_SANDBOX", default=False)
