"""The test command on a run's base commit, before any edit: kept per base commit,
environment and command, so that a run can tell the failures it caused from those it
found — and a test command that cannot even start from failing tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from ..git import GitError
from ..models import BaseTestResult, Repository
from ..runner_output import cannot_start_reason, failing_tests
from ..verify import VerifyResult

CANNOT_START = (
    "The test command cannot run the tests in this environment: {reason}. Nothing has been "
    "changed yet, so this is the environment, not the code: add or fix the setup script (or the "
    "test command) on the Repository page, then Retry."
)


@dataclass(frozen=True)
class BaseTests:
    result: BaseTestResult
    ran_now: bool
    # Why the command could not run the tests at all, or "".
    cannot_start: str

    def as_dict(self) -> dict[str, object]:
        return {
            "base_commit": self.result.base_commit,
            "passed": self.result.passed,
            "exit_code": self.result.exit_code,
            "timed_out": self.result.timed_out,
            "failing_tests": self.result.failing_tests,
            "duration_ms": self.result.duration_ms,
            "ran_now": self.ran_now,
        }


def _own_module_test(repository: Repository, commit: str) -> Callable[[str], bool]:
    """Whether a name is a top-level file or folder of the repository at ``commit`` (as a
    module: ``name`` or ``name.py``, ``name.js``…); read once, when first asked."""
    names: set[str] | None = None

    def own(name: str) -> bool:
        nonlocal names
        if names is None:
            from repos.services.reading import top_level_names_at_commit

            try:
                names = top_level_names_at_commit(repository=repository, commit=commit)
            except GitError:
                names = set()  # unknown: the output's words decide, as before
        return bool(name) and any(entry == name or entry.startswith(f"{name}.") for entry in names)

    return own


def base_tests(
    *,
    repository: Repository,
    base_commit: str,
    environment_key: str,
    run_tests: Callable[[], VerifyResult],
) -> BaseTests:
    """The kept outcome of the test command on ``base_commit`` in the environment, or,
    when there is none, the command run now (``run_tests``) and kept — unless it was
    cancelled or could not start (then nothing is kept: the next attempt runs it again)."""
    command = repository.test_command.strip()
    kept = BaseTestResult.objects.filter(
        repository=repository, base_commit=base_commit, environment_key=environment_key, test_command=command
    ).first()
    if kept is not None:
        return BaseTests(kept, ran_now=False, cannot_start="")
    result = run_tests()
    reason = cannot_start_reason(
        exit_code=result.exit_code, output=result.output, own=_own_module_test(repository, base_commit)
    )
    row = BaseTestResult(
        repository=repository,
        base_commit=base_commit,
        environment_key=environment_key,
        test_command=command,
        exit_code=result.exit_code,
        passed=result.passed,
        timed_out=result.timed_out,
        failing_tests=failing_tests(result.output),
        output=result.output[-20_000:],
        duration_ms=result.duration_ms,
    )
    if reason:
        return BaseTests(row, ran_now=True, cannot_start=CANNOT_START.format(reason=reason))
    if not result.cancelled:
        try:
            with transaction.atomic():
                row.save()
        except IntegrityError:
            pass  # another run of the same base kept its own first
    return BaseTests(row, ran_now=True, cannot_start="")
