"""Reading a test command's output: which tests failed, in each runner's words, and
whether the command could not even start (the environment, not the code)."""

from __future__ import annotations

import pytest

from repos.runner_output import cannot_start_reason, failing_tests
from repos.verify import VerifyResult, verify_findings


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (
            "=== short test summary info ===\nFAILED tests/test_a.py::test_one - AssertionError: x\n"
            "ERROR tests/test_b.py::test_two\n1 failed, 1 error\n",
            ["tests/test_a.py::test_one", "tests/test_b.py::test_two"],
        ),
        (
            "FAIL: test_add (test_calc.Test.test_add)\n----\nERROR: test_io (app.tests.IoTest.test_io)\n",
            ["test_add (test_calc.Test.test_add)", "test_io (app.tests.IoTest.test_io)"],
        ),
        (
            "TAP version 13\nok 1 - parses\nnot ok 2 - adds numbers\nnot ok 3 - skips # TODO later\n",
            ["adds numbers", "skips"],
        ),
        (
            "=== RUN   TestAdd\n--- FAIL: TestAdd (0.00s)\n    --- FAIL: TestAdd/negative (0.00s)\n",
            ["TestAdd", "TestAdd/negative"],
        ),
        ("test tests::adds ... FAILED\ntest tests::parses ... ok\n", ["tests::adds"]),
        ("  \x1b[31m✕\x1b[39m adds numbers (3 ms)\n  ✓ parses\n", ["adds numbers"]),
        ("FAILED tests/test_a.py::test_one\nFAILED tests/test_a.py::test_one\n", ["tests/test_a.py::test_one"]),
        ("all good\n3 passed\n", []),
    ],
)
def test_failing_tests_in_each_runners_words(output: str, expected: list[str]) -> None:
    assert failing_tests(output) == expected


@pytest.mark.parametrize(
    ("exit_code", "output", "reason"),
    [
        (127, "sh: 1: pytest: not found\n", "pytest is not installed"),
        (127, "/bin/sh: 1: python: not found\n", "python is not installed"),
        (1, "/usr/bin/python3: No module named pytest\n", "the Python module pytest is not installed"),
        (2, "ImportError while importing test module\nE   ModuleNotFoundError: No module named 'requests'\n",
         "the Python module requests is not installed"),
        (1, "Error: Cannot find module 'uvu'\nRequire stack:\n", "the Node module uvu is not installed"),
        (127, "> uvu tests\nsh: 1: uvu: not found\n", "uvu is not installed"),
        (126, "permission denied\n", "a program it runs cannot be executed (exit 126)"),
        (1, "FAILED tests/test_a.py::test_one - AssertionError\n", ""),
        (0, "No module named foo (handled)\n", ""),
        (None, "killed\n", ""),
    ],
)  # fmt: skip
def test_a_command_that_cannot_start_is_told_from_failing_tests(exit_code, output, reason) -> None:
    assert cannot_start_reason(exit_code=exit_code, output=output) == reason


def _failed(output: str, exit_code: int = 1) -> VerifyResult:
    return VerifyResult(exit_code, False, False, False, output, 10, True, True)


def test_failures_the_base_already_had_are_not_the_changes() -> None:
    old = "FAILED tests/test_a.py::test_old - AssertionError\n"
    assert verify_findings(_failed(old), already_failing=["tests/test_a.py::test_old"]) == []

    both = old + "FAILED tests/test_a.py::test_new - AssertionError\n"
    findings = verify_findings(_failed(both), already_failing=["tests/test_a.py::test_old"])
    named = [finding["message"] for finding in findings if finding["file"]]
    assert named == ["Test failed: test_new — AssertionError"]
    assert "New failures: tests/test_a.py::test_new" in findings[-1]["message"]
    assert "already failing on the base commit: tests/test_a.py::test_old" in findings[-1]["message"]
    # Without a base to compare with, every failure counts.
    assert len(verify_findings(_failed(both))) == 3
    # A run that failed without naming any test is never excused by the base.
    assert verify_findings(_failed("Segmentation fault\n", 139), already_failing=["x"]) != []


@pytest.mark.parametrize(
    ("output", "own", "reason"),
    [
        # The repository's own module, removed from the base: its tests fail, the code's business.
        ("ModuleNotFoundError: No module named 'src.inventory'\n", {"src", "tests"}, ""),
        ("Error: Cannot find module './lib/util'\nRequire stack:\n", {"lib"}, ""),
        ("ModuleNotFoundError: No module named 'app'\n", {"app.py"}, ""),
        # A dependency the environment lacks is still the environment.
        ("ModuleNotFoundError: No module named 'requests'\n", {"src"}, "the Python module requests is not installed"),
        ("Error: Cannot find module 'uvu'\n", {"lib"}, "the Node module uvu is not installed"),
    ],
)  # fmt: skip
def test_a_module_of_the_repository_itself_is_not_the_environment(output, own, reason) -> None:
    def holds(name: str) -> bool:
        return any(entry == name or entry.startswith(f"{name}.") for entry in own)

    assert cannot_start_reason(exit_code=1, output=output, own=holds) == reason
