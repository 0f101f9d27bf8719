"""The files of `make demo`'s sample repository (repos_demo): a tiny greeting package, and
``src/inventory.py``, a realistic module of a few hundred lines with its tests, where the
scripted demo model (llm/demo/demo_app.py) makes its one-line fixes."""

from __future__ import annotations

INVENTORY_MODULE = r'''"""Stock keeping for a small shop: products, stock levels, reservations, orders, and the
reports the shop owner reads every morning.

Quantities are whole units. Money is in cents (int), never floats: a price of 4.50 is 450.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date

__version__ = "1.4.0"

BULK_THRESHOLD = 10  # units of one product on an order line that earn the bulk discount
BULK_DISCOUNT_PERCENT = 5
TAX_PERCENT = 20
DEFAULT_REORDER_LEVEL = 5
CSV_FIELDS = ("sku", "name", "price_cents", "category", "on_hand", "reserved", "reorder_level")


class InventoryError(Exception):
    """Something the shop asked for cannot be done with the stock it has."""


class UnknownProduct(InventoryError):
    def __init__(self, sku: str) -> None:
        super().__init__(f"No product with SKU {sku!r}.")
        self.sku = sku


class OutOfStock(InventoryError):
    def __init__(self, sku: str, wanted: int, available: int) -> None:
        super().__init__(f"{sku}: {wanted} wanted, {available} available.")
        self.sku = sku
        self.wanted = wanted
        self.available = available


class UnknownOrder(InventoryError):
    def __init__(self, number: int) -> None:
        super().__init__(f"No order number {number}.")
        self.number = number


def _positive(quantity: int, what: str = "quantity") -> int:
    if not isinstance(quantity, int) or isinstance(quantity, bool):
        raise TypeError(f"The {what} must be a whole number, not {quantity!r}.")
    if quantity <= 0:
        raise ValueError(f"The {what} must be positive, not {quantity}.")
    return quantity


@dataclass(frozen=True)
class Product:
    sku: str
    name: str
    price_cents: int
    category: str = "general"

    def __post_init__(self) -> None:
        if not self.sku.strip():
            raise ValueError("A product needs a SKU.")
        if self.price_cents < 0:
            raise ValueError(f"{self.sku}: a price cannot be negative.")


@dataclass
class StockItem:
    product: Product
    on_hand: int = 0
    reserved: int = 0
    reorder_level: int = DEFAULT_REORDER_LEVEL

    @property
    def sku(self) -> str:
        return self.product.sku

    @property
    def available(self) -> int:
        """What can still be promised to a customer: on the shelf and not reserved."""
        return self.on_hand - self.reserved

    def needs_reorder(self) -> bool:
        """True once the available stock is down to the reorder level."""
        return self.available < self.reorder_level

    def value_cents(self) -> int:
        return self.on_hand * self.product.price_cents


@dataclass
class OrderLine:
    sku: str
    quantity: int
    unit_price_cents: int

    @property
    def total_cents(self) -> int:
        return self.quantity * self.unit_price_cents


@dataclass
class Order:
    number: int
    customer: str
    lines: list[OrderLine] = field(default_factory=list)
    placed_on: date = field(default_factory=date.today)
    cancelled: bool = False

    @property
    def units(self) -> int:
        return sum(line.quantity for line in self.lines)

    def line_for(self, sku: str) -> OrderLine | None:
        for line in self.lines:
            if line.sku == sku:
                return line
        return None


def bulk_discount_cents(line: OrderLine) -> int:
    """The discount on one order line: BULK_DISCOUNT_PERCENT from BULK_THRESHOLD units on."""
    if line.quantity > BULK_THRESHOLD:
        return line.total_cents * BULK_DISCOUNT_PERCENT // 100
    return 0


def order_totals(order: Order) -> dict[str, int]:
    """Subtotal, discount, tax and total of an order, in cents (tax on the discounted sum)."""
    subtotal = sum(line.total_cents for line in order.lines)
    discount = sum(bulk_discount_cents(line) for line in order.lines)
    taxable = subtotal - discount
    tax = taxable * TAX_PERCENT // 100
    return {"subtotal": subtotal, "discount": discount, "tax": tax, "total": taxable + tax}


def format_cents(cents: int, currency: str = "€") -> str:
    sign = "-" if cents < 0 else ""
    whole, rest = divmod(abs(cents), 100)
    return f"{sign}{currency}{whole:,}.{rest:02d}"


class Inventory:
    """The shop's stock, by SKU, and the orders placed against it."""

    def __init__(self) -> None:
        self._items: dict[str, StockItem] = {}
        self._orders: dict[int, Order] = {}
        self._next_order = 1

    # --- products and stock

    def add_product(
        self, product: Product, *, on_hand: int = 0, reorder_level: int = DEFAULT_REORDER_LEVEL
    ) -> StockItem:
        if product.sku in self._items:
            raise InventoryError(f"{product.sku} is already stocked.")
        if on_hand < 0:
            raise ValueError(f"{product.sku}: stock on hand cannot be negative.")
        item = StockItem(product=product, on_hand=on_hand, reorder_level=reorder_level)
        self._items[product.sku] = item
        return item

    def item(self, sku: str) -> StockItem:
        try:
            return self._items[sku]
        except KeyError:
            raise UnknownProduct(sku) from None

    def __contains__(self, sku: object) -> bool:
        return sku in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[StockItem]:
        return iter(sorted(self._items.values(), key=lambda item: item.sku))

    def receive(self, sku: str, quantity: int) -> int:
        """A delivery arrived: the new stock on hand."""
        item = self.item(sku)
        item.on_hand += _positive(quantity)
        return item.on_hand

    def reserve(self, sku: str, quantity: int) -> None:
        """Hold units for an order that is not shipped yet."""
        item = self.item(sku)
        _positive(quantity)
        if quantity > item.available:
            raise OutOfStock(sku, quantity, item.available)
        item.reserved += quantity

    def release(self, sku: str, quantity: int) -> None:
        """Give held units back (an order was changed or cancelled)."""
        item = self.item(sku)
        _positive(quantity)
        item.reserved -= quantity

    def ship(self, sku: str, quantity: int) -> None:
        """Units leave the shelf; those that were reserved stop being reserved."""
        item = self.item(sku)
        _positive(quantity)
        if quantity > item.on_hand:
            raise OutOfStock(sku, quantity, item.on_hand)
        item.on_hand -= quantity
        item.reserved = max(0, item.reserved - quantity)

    # --- orders

    def place_order(self, customer: str, quantities: dict[str, int]) -> Order:
        """Reserve every line or none: an order that cannot be filled changes nothing."""
        if not quantities:
            raise ValueError("An order needs at least one line.")
        for sku, quantity in quantities.items():
            item = self.item(sku)
            if _positive(quantity) > item.available:
                raise OutOfStock(sku, quantity, item.available)
        order = Order(number=self._next_order, customer=customer)
        for sku, quantity in sorted(quantities.items()):
            self.reserve(sku, quantity)
            order.lines.append(OrderLine(sku, quantity, self.item(sku).product.price_cents))
        self._orders[order.number] = order
        self._next_order += 1
        return order

    def order(self, number: int) -> Order:
        try:
            return self._orders[number]
        except KeyError:
            raise UnknownOrder(number) from None

    def cancel_order(self, number: int) -> Order:
        order = self.order(number)
        if not order.cancelled:
            for line in order.lines:
                self.release(line.sku, line.quantity)
            order.cancelled = True
        return order

    def open_orders(self) -> list[Order]:
        return [order for order in self._orders.values() if not order.cancelled]

    # --- reports

    def reorder_report(self) -> list[StockItem]:
        """The items to order again, the emptiest first."""
        due = [item for item in self if item.needs_reorder()]
        return sorted(due, key=lambda item: (item.available - item.reorder_level, item.sku))

    def stock_value_cents(self, category: str | None = None) -> int:
        return sum(item.value_cents() for item in self if category in (None, item.product.category))

    def categories(self) -> list[str]:
        return sorted({item.product.category for item in self})

    # --- CSV, as the shop's spreadsheet has it

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        for item in self:
            writer.writerow(
                {
                    "sku": item.sku,
                    "name": item.product.name,
                    "price_cents": item.product.price_cents,
                    "category": item.product.category,
                    "on_hand": item.on_hand,
                    "reserved": item.reserved,
                    "reorder_level": item.reorder_level,
                }
            )
        return out.getvalue()

    @classmethod
    def from_csv(cls, text: str) -> Inventory:
        inventory = cls()
        for number, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
            missing = [name for name in CSV_FIELDS if not (row.get(name) or "").strip()]
            if missing and missing != ["category"]:
                raise ValueError(f"Row {number}: missing {', '.join(missing)}.")
            product = Product(
                sku=row["sku"].strip(),
                name=row["name"].strip(),
                price_cents=int(row["price_cents"]),
                category=(row.get("category") or "general").strip(),
            )
            item = inventory.add_product(product, on_hand=int(row["on_hand"]), reorder_level=int(row["reorder_level"]))
            item.reserved = int(row["reserved"])
        return inventory


def low_stock_lines(items: Iterable[StockItem]) -> list[str]:
    return [
        f"{item.sku:<10} {item.product.name:<24} {item.available:>5} left (reorder at {item.reorder_level})"
        for item in items
    ]


def daily_summary(inventory: Inventory, day: date | None = None) -> str:
    """The morning report: stock value, open orders, and what to reorder."""
    day = day or date.today()
    orders = inventory.open_orders()
    totals = [order_totals(order)["total"] for order in orders]
    lines = [
        f"Stock report for {day.isoformat()}",
        f"Products: {len(inventory)} in {len(inventory.categories())} categories",
        f"Stock value: {format_cents(inventory.stock_value_cents())}",
        f"Open orders: {len(orders)}, worth {format_cents(sum(totals))}",
    ]
    due = inventory.reorder_report()
    if due:
        lines.append("To reorder:")
        lines.extend(f"  {line}" for line in low_stock_lines(due))
    else:
        lines.append("Nothing to reorder.")
    return "\n".join(lines)
'''

INVENTORY_TESTS = r"""from src.inventory import (
    BULK_DISCOUNT_PERCENT,
    BULK_THRESHOLD,
    Inventory,
    OrderLine,
    OutOfStock,
    Product,
    StockItem,
    bulk_discount_cents,
    format_cents,
    order_totals,
)

TEA = Product("TEA-1", "Green tea", 450, "drinks")
MUG = Product("MUG-1", "Blue mug", 1200, "kitchen")


def _shop() -> Inventory:
    inventory = Inventory()
    inventory.add_product(TEA, on_hand=20, reorder_level=5)
    inventory.add_product(MUG, on_hand=3, reorder_level=4)
    return inventory


def test_an_order_reserves_its_units() -> None:
    inventory = _shop()
    order = inventory.place_order("Ada", {"TEA-1": 4})
    assert order.number == 1 and order.units == 4
    assert inventory.item("TEA-1").available == 16


def test_an_order_that_cannot_be_filled_changes_nothing() -> None:
    inventory = _shop()
    try:
        inventory.place_order("Ada", {"TEA-1": 2, "MUG-1": 9})
    except OutOfStock as exc:
        assert exc.sku == "MUG-1"
    else:
        raise AssertionError("the order should have been refused")
    assert inventory.item("TEA-1").reserved == 0


def test_cancelling_an_order_releases_its_units() -> None:
    inventory = _shop()
    order = inventory.place_order("Ada", {"TEA-1": 4})
    inventory.cancel_order(order.number)
    assert inventory.item("TEA-1").available == 20


def test_the_reorder_report_lists_what_runs_low() -> None:
    assert [item.sku for item in _shop().reorder_report()] == ["MUG-1"]


def test_order_totals_in_cents() -> None:
    inventory = _shop()
    order = inventory.place_order("Ada", {"TEA-1": 2, "MUG-1": 1})
    assert order_totals(order) == {"subtotal": 2100, "discount": 0, "tax": 420, "total": 2520}


def test_a_big_order_line_gets_the_bulk_discount() -> None:
    line = OrderLine("TEA-1", BULK_THRESHOLD + 5, 100)
    assert bulk_discount_cents(line) == (BULK_THRESHOLD + 5) * 100 * BULK_DISCOUNT_PERCENT // 100


def test_format_cents() -> None:
    assert format_cents(123456) == "€1,234.56" and format_cents(-5) == "-€0.05"


def test_csv_round_trip() -> None:
    inventory = _shop()
    inventory.reserve("MUG-1", 1)
    again = Inventory.from_csv(inventory.to_csv())
    assert again.to_csv() == inventory.to_csv()
    assert isinstance(again.item("MUG-1"), StockItem)
"""

# The test command: runs every test_* function of tests/, no pytest needed.
RUN_TESTS = r"""import importlib
import pathlib
import sys
import traceback

sys.path.insert(0, str(pathlib.Path(__file__).parent))
failed = 0
for path in sorted(pathlib.Path("tests").glob("test_*.py")):
    module = importlib.import_module(f"tests.{path.stem}")
    for name in sorted(dir(module)):
        if name.startswith("test_"):
            try:
                getattr(module, name)()
                print(f"PASSED {path}::{name}")
            except Exception:
                failed += 1
                print(f"FAILED {path}::{name}")
                traceback.print_exc()
print(f"{failed} failed")
sys.exit(1 if failed else 0)
"""

FILES = {
    "README.md": (
        "# Demo app\n\nA tiny package for AutoCoder's demo: a greeting, and the shop's stock keeping "
        "(`src/inventory.py`).\n\nTests: `python3 run_tests.py`.\n"
    ),
    "src/__init__.py": "",
    "src/greeting.py": 'def greet(name: str) -> str:\n    return f"Hello, {name}!"\n',
    "src/inventory.py": INVENTORY_MODULE,
    "tests/__init__.py": "",
    "tests/test_greeting.py": (
        'from src.greeting import greet\n\n\ndef test_greet() -> None:\n    assert greet("Ada") == "Hello, Ada!"\n'
    ),
    "tests/test_inventory.py": INVENTORY_TESTS,
    "run_tests.py": RUN_TESTS,
}
