"""What the demo model knows about `make demo`'s sample repository (demo-app, made by
``manage.py repos_demo``): the one-line bugs of its big module, each with the test that
shows it, and the version line it bumps once they are all fixed.

Knowledge, not state: the model finds out which bugs are still there by viewing the
files in the run's worktree, so every run after an approved one has work of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BIG_FILE = "src/inventory.py"
TEST_FILE = "tests/test_inventory.py"


@dataclass(frozen=True)
class Bug:
    """One wrong line of BIG_FILE (``old``, exactly as the file has it) and its fix, and a
    test (appended to TEST_FILE) that fails until the fix is made."""

    title: str
    old: str
    new: str
    test_name: str
    test: str


BUGS = (
    Bug(
        title="an item down to exactly its reorder level is not reported for reordering",
        old="        return self.available < self.reorder_level",
        new="        return self.available <= self.reorder_level",
        test_name="test_an_item_at_its_reorder_level_needs_reordering",
        test=(
            "def test_an_item_at_its_reorder_level_needs_reordering() -> None:\n"
            '    item = StockItem(Product("TEA-2", "Black tea", 400), on_hand=5, reorder_level=5)\n'
            "    assert item.needs_reorder()\n"
        ),
    ),
    Bug(
        title="an order line of exactly BULK_THRESHOLD units gets no bulk discount",
        old="    if line.quantity > BULK_THRESHOLD:",
        new="    if line.quantity >= BULK_THRESHOLD:",
        test_name="test_the_bulk_discount_starts_at_the_threshold",
        test=(
            "def test_the_bulk_discount_starts_at_the_threshold() -> None:\n"
            '    line = OrderLine("TEA-1", BULK_THRESHOLD, 100)\n'
            "    assert bulk_discount_cents(line) == BULK_THRESHOLD * 100 * BULK_DISCOUNT_PERCENT // 100\n"
        ),
    ),
    Bug(
        title="releasing more units than are reserved leaves a negative reservation",
        old="        item.reserved -= quantity",
        new="        item.reserved = max(0, item.reserved - quantity)",
        test_name="test_releasing_more_than_is_reserved_leaves_nothing_reserved",
        test=(
            "def test_releasing_more_than_is_reserved_leaves_nothing_reserved() -> None:\n"
            "    inventory = _shop()\n"
            '    inventory.reserve("TEA-1", 2)\n'
            '    inventory.release("TEA-1", 5)\n'
            '    assert inventory.item("TEA-1").reserved == 0\n'
        ),
    ),
)

VERSION_LINE = re.compile(r'^__version__ = "(\d+)\.(\d+)\.(\d+)"$', re.MULTILINE)


def bug_still_there(text: str) -> Bug | None:
    """The first bug whose wrong line ``text`` (BIG_FILE's content) still has, once."""
    lines = text.split("\n")
    for bug in BUGS:
        if lines.count(bug.old) == 1:
            return bug
    return None


def version_bump(text: str) -> tuple[str, str] | None:
    """``(old line, new line)`` raising the patch version, or None without a version line."""
    match = VERSION_LINE.search(text)
    if match is None:
        return None
    major, minor, patch = match.groups()
    return match.group(0), f'__version__ = "{major}.{minor}.{int(patch) + 1}"'
