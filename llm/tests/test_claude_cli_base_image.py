"""The Claude CLI's test runner on a repository's base image: the test command's nested
sandbox runs on the image's tree (bound read-only into the CLI's), as the verify step's
does; without the sandbox such a call is refused rather than run on the server's files.
The fake CLI is tests/bin/claude; the image a layout built by core/tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.exceptions import SandboxUnavailable
from core.sandbox import IMAGE_NEEDS_SANDBOX
from core.sandbox_images import image_root
from core.tests.test_sandbox_images import images  # noqa: F401 - a fixture
from llm.tests.test_claude_cli_isolation import (  # noqa: F401 - fixtures
    _complete,
    _edit_request,
    _fake_cli_sees_its_settings,
    home,
    scratch,
    worktree,
)


def test_the_cli_runs_the_test_command_on_the_image(
    images: Path,  # noqa: F811
    worktree: Path,  # noqa: F811
    home: Path,  # noqa: F811
    scratch: Path,  # noqa: F811
    monkeypatch,
) -> None:
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "run_tests")
    request = _edit_request(
        worktree,
        "read marker < /etc/image-marker; echo image says $marker $PYTHON_VERSION; "
        "test -e /usr/bin/python3 && echo host-python || echo no-host-python",
    )
    request.commands_image = image_root("oci:base:t")
    output = _complete(request).text
    assert "image says from-the-image 3.12.7" in output
    assert "no-host-python" in output


def test_without_the_sandbox_the_call_is_refused(
    images: Path,  # noqa: F811
    worktree: Path,  # noqa: F811
    home: Path,  # noqa: F811
    scratch: Path,  # noqa: F811
    settings,
    monkeypatch,
) -> None:
    image = image_root("oci:base:t")
    settings.UNSAFE_RUN_TESTS_WITHOUT_SANDBOX = True
    monkeypatch.setenv("FAKE_CLAUDE_EDIT_MODE", "run_tests")
    request = _edit_request(worktree, "echo ran > ran.txt")
    request.commands_image = image
    with pytest.raises(SandboxUnavailable) as raised:
        _complete(request)
    assert raised.value.message == IMAGE_NEEDS_SANDBOX.format(reference="oci:base:t")
    assert not (worktree / "ran.txt").exists()
