#!/usr/bin/env python3
"""Did a topology's pass of the suite really run? Reads the JUnit XML report pytest wrote
for it (--junitxml) and fails, saying why, when:

- there is no report: the pass did not run (or died before pytest's end);
- no test ran (every one skipped or deselected): a green pass that proved nothing;
- a test that only this topology runs (--must-run, a substring of "module::test") did not
  run: the topology was skipped, e.g. a service the pass needs was missing;
- a skip gave a reason that must not appear here (--no-skip-reason, a substring).

Standard library only: CI calls it with the machine's Python.

Usage: junit_ran.py REPORT --topology NAME [--must-run TEST]... [--no-skip-reason TEXT]...
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Outcome:
    ran: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # test -> reason


def read_report(path: Path) -> Outcome:
    outcome = Outcome()
    # Our own pytest wrote the report, in this run: trusted input.
    for case in ET.parse(path).getroot().iter("testcase"):  # noqa: S314
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        skipped = case.find("skipped")
        if skipped is None:
            outcome.ran.append(test)
        else:
            outcome.skipped[test] = f"{skipped.get('message', '')} {skipped.text or ''}".strip()
    return outcome


def problems(
    report: Path, *, topology: str, must_run: Sequence[str] = (), no_skip_reasons: Sequence[str] = ()
) -> list[str]:
    if not report.is_file():
        return [f"the {topology} pass did not run: no report at {report}"]
    try:
        outcome = read_report(report)
    except ET.ParseError as error:
        return [f"the {topology} pass left an unreadable report {report}: {error}"]
    found = []
    if not outcome.ran:
        found.append(f"the {topology} pass ran no test ({len(outcome.skipped)} skipped)")
    found += [
        f"the {topology} pass did not run {test!r}: the topology's own tests were skipped or missing"
        for test in must_run
        if not any(test in name for name in outcome.ran)
    ]
    for reason in no_skip_reasons:
        skipped_for_it = [name for name, why in outcome.skipped.items() if reason in why]
        if skipped_for_it:
            found.append(
                f"the {topology} pass skipped {len(skipped_for_it)} tests for {reason!r}, e.g. {skipped_for_it[0]}"
            )
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path)
    parser.add_argument("--topology", required=True)
    parser.add_argument("--must-run", action="append", default=[])
    parser.add_argument("--no-skip-reason", action="append", default=[])
    args = parser.parse_args(argv)
    found = problems(args.report, topology=args.topology, must_run=args.must_run, no_skip_reasons=args.no_skip_reason)
    for problem in found:
        print(f"FAIL: {problem}", file=sys.stderr)
    if found:
        return 1
    outcome = read_report(args.report)
    print(f"== {args.topology}: {len(outcome.ran)} tests ran, {len(outcome.skipped)} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
