"""The retail-lite store: users, orders and products generated from one seed, the
store's rules, and the customer-service tools that act on one store instance.

Pure Python and offline: ``Store.generate(seed)`` draws everything from
``random.Random(seed)``, so one seed is one store, on every machine. A store compares
by value (``==``) and by ``digest()``, the hash of its canonical JSON, which is how
retail-lite scores a rollout: the final store must equal the expected one.
"""

from __future__ import annotations

import copy
import hashlib
import json
import random
from collections.abc import Callable
from typing import Any, Literal

import attrs

__all__ = [
    "CANCEL_REASONS",
    "Address",
    "Item",
    "Order",
    "Product",
    "RetailTools",
    "Store",
    "StoreError",
    "User",
    "describe",
    "random_address",
]

CANCEL_REASONS = ("no longer needed", "ordered by mistake")

FIRST_NAMES = (
    "Mia", "Noah", "Ava", "Liam", "Sofia", "Ethan", "Yara", "Omar", "Lena", "Ivan",
    "Chen", "Priya", "Mateo", "Aisha", "Lucas", "Emma", "Yusuf", "Hana", "Diego", "Nora",
)  # fmt: skip
LAST_NAMES = (
    "Garcia", "Smith", "Kim", "Nguyen", "Patel", "Rossi", "Muller", "Silva", "Cohen",
    "Brown", "Sato", "Lopez", "Ahmed", "Novak", "Hughes", "Moreau", "Jensen", "Ito",
)  # fmt: skip
STREETS = (
    "Maple Street", "Oak Avenue", "Pine Road", "Cedar Lane", "Elm Street", "Lakeview Drive",
    "Hillside Avenue", "River Road", "Sunset Boulevard", "Park Place", "Willow Way",
)  # fmt: skip
CITIES = (
    ("Austin", "TX", "787"), ("Denver", "CO", "802"), ("Seattle", "WA", "981"),
    ("Boston", "MA", "021"), ("Chicago", "IL", "606"), ("Portland", "OR", "972"),
    ("Phoenix", "AZ", "850"), ("Atlanta", "GA", "303"), ("Columbus", "OH", "432"),
)  # fmt: skip
COLORS = ("black", "white", "blue", "red", "green", "grey")
# product name, base price in dollars, option name -> values
CATALOG: tuple[tuple[str, int, dict[str, tuple[str, ...]]], ...] = (
    ("T-Shirt", 20, {"color": COLORS, "size": ("S", "M", "L", "XL")}),
    ("Water Bottle", 25, {"capacity": ("500ml", "750ml", "1000ml"), "color": COLORS}),
    ("Desk Lamp", 45, {"color": COLORS, "power source": ("battery", "USB", "AC adapter")}),
    ("Backpack", 70, {"color": COLORS, "size": ("small", "medium", "large")}),
    ("Headphones", 120, {"type": ("over-ear", "on-ear", "in-ear"), "color": COLORS}),
    ("Running Shoes", 95, {"size": ("8", "9", "10", "11"), "color": COLORS}),
    ("Coffee Maker", 80, {"capacity": ("4 cups", "8 cups"), "type": ("drip", "espresso")}),
    ("Yoga Mat", 30, {"thickness": ("4mm", "6mm"), "color": COLORS}),
)
NUM_USERS = 5


class StoreError(Exception):
    """A store rule refused an action, or an id does not exist. Raised by the tools,
    its message goes back to the model as the tool's answer."""


@attrs.frozen
class Address:
    address1: str
    address2: str
    city: str
    state: str
    zip: str
    country: str = "USA"

    def line(self) -> str:
        """One line, as a customer writes it: ``12 Oak Avenue, Apt 4, Austin, TX 78701, USA``."""
        street = f"{self.address1}, {self.address2}" if self.address2 else self.address1
        return f"{street}, {self.city}, {self.state} {self.zip}, {self.country}"


@attrs.frozen
class Item:
    """One variant of a product (what an order line holds)."""

    item_id: str
    product_id: str
    name: str
    options: dict[str, str]
    price: float


def describe(item: Item) -> str:
    """How a customer names an item: ``Backpack (color: blue, size: large)``."""
    options = ", ".join(f"{k}: {v}" for k, v in item.options.items())
    return f"{item.name} ({options})"


@attrs.define
class Product:
    product_id: str
    name: str
    variants: list[Item]


@attrs.define
class Order:
    """``status``: pending, delivered, cancelled, or "return requested"."""

    order_id: str
    user_id: str
    address: Address
    items: list[Item]
    status: str
    cancel_reason: str | None = None
    return_items: list[str] = attrs.field(factory=list)


@attrs.define
class User:
    user_id: str
    first_name: str
    last_name: str
    email: str
    address: Address
    orders: list[str]


@attrs.define
class Store:
    users: dict[str, User]
    orders: dict[str, Order]
    products: dict[str, Product]

    @classmethod
    def generate(cls, seed: int) -> Store:
        """The store of ``seed``: every user has at least one pending and one delivered
        order, so every goal kind has something to act on."""
        return _Generator(random.Random(seed)).store()

    def copy(self) -> Store:
        return copy.deepcopy(self)

    def snapshot(self) -> dict[str, Any]:
        """The whole store as plain JSON-able data."""
        return attrs.asdict(self)

    def digest(self) -> str:
        """A short hash of the canonical JSON of the store: equal stores, equal digests."""
        text = json.dumps(self.snapshot(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def user(self, user_id: str) -> User:
        try:
            return self.users[user_id]
        except KeyError:
            raise StoreError(f"no user with id {user_id!r}") from None

    def order(self, order_id: str) -> Order:
        key = order_id if order_id.startswith("#") else f"#{order_id}"
        try:
            return self.orders[key]
        except KeyError:
            raise StoreError(f"no order with id {order_id!r} (ids look like #W1234567)") from None


def random_address(rng: random.Random) -> Address:
    """A plausible US address drawn from ``rng``."""
    city, state, zip_prefix = rng.choice(CITIES)
    number = rng.randint(1, 9999)
    unit = rng.choice(["", "", f"Apt {rng.randint(1, 40)}", f"Suite {number % 97 + 1}"])
    zip_code = zip_prefix + f"{rng.randint(0, 99):02d}"
    return Address(f"{number} {rng.choice(STREETS)}", unit, city, state, zip_code)


class _Generator:
    """Draws one store from ``rng``; ids are unique within the store."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.taken: set[str] = set()

    def fresh(self, make: Callable[[], str]) -> str:
        while (value := make()) in self.taken:
            pass
        self.taken.add(value)
        return value

    def digits(self, n: int) -> str:
        return "".join(self.rng.choice("0123456789") for _ in range(n))

    def store(self) -> Store:
        products = [self.product(*entry) for entry in CATALOG]
        items = [item for p in products for item in p.variants]
        names = self.rng.sample([(f, la) for f in FIRST_NAMES for la in LAST_NAMES], NUM_USERS)
        users, orders = {}, {}
        for first, last in names:
            user = self.user(first, last)
            for status in self.statuses():
                order = self.order(user, status, items)
                orders[order.order_id] = order
                user.orders.append(order.order_id)
            users[user.user_id] = user
        return Store(users, orders, {p.product_id: p for p in products})

    def product(self, name: str, base: int, options: dict[str, tuple[str, ...]]) -> Product:
        product_id = self.fresh(lambda: self.digits(10))
        combos: set[tuple[str, ...]] = set()
        while len(combos) < 3:
            combos.add(tuple(self.rng.choice(values) for values in options.values()))
        variants = [
            Item(
                self.fresh(lambda: self.digits(10)),
                product_id,
                name,
                dict(zip(options, combo, strict=True)),
                round(base * self.rng.uniform(0.8, 1.3), 2),
            )
            for combo in sorted(combos)
        ]
        return Product(product_id, name, variants)

    def user(self, first: str, last: str) -> User:
        number = self.digits(4)
        user_id = f"{first}_{last}_{number}".lower()  # names are distinct: ids are too
        email = f"{first}.{last}{number}@example.com".lower()
        return User(user_id, first, last, email, random_address(self.rng), [])

    def statuses(self) -> list[str]:
        extra = self.rng.choices(["pending", "delivered", "cancelled"], k=self.rng.randint(0, 2))
        statuses = ["pending", "delivered", *extra]
        self.rng.shuffle(statuses)
        return statuses

    def order(self, user: User, status: str, items: list[Item]) -> Order:
        order_id = self.fresh(lambda: "#W" + self.digits(7))
        lines = sorted(self.rng.sample(items, self.rng.randint(1, 3)), key=lambda i: i.item_id)
        reason = self.rng.choice(CANCEL_REASONS) if status == "cancelled" else None
        return Order(order_id, user.user_id, user.address, lines, status, reason)


def _order_view(order: Order) -> dict[str, Any]:
    view = attrs.asdict(order)
    if order.cancel_reason is None:
        del view["cancel_reason"]
    if not order.return_items:
        del view["return_items"]
    return view


class RetailTools:
    """The customer-service tools, bound to one store (one per rollout). Each public
    method is a tool: its docstring is the description the model reads."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def all(self) -> tuple[Callable[..., Any], ...]:
        """Every tool, in the order they are offered."""
        return (
            self.find_user_id_by_email,
            self.find_user_id_by_name_zip,
            self.get_user_details,
            self.list_user_orders,
            self.get_order_details,
            self.get_product_details,
            self.cancel_pending_order,
            self.modify_pending_order_address,
            self.return_delivered_order_items,
        )

    def find_user_id_by_email(self, email: str) -> str:
        """Find a customer's user id from their email address.

        Args:
            email: the customer's email address, e.g. "mia.garcia1234@example.com"
        """
        wanted = email.strip().lower()
        for user in self.store.users.values():
            if user.email == wanted:
                return user.user_id
        raise StoreError(f"no user with email {email!r}")

    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find a customer's user id from their first name, last name and zip code.

        Args:
            first_name: the customer's first name, e.g. "Mia"
            last_name: the customer's last name, e.g. "Garcia"
            zip: the zip code of the customer's address, e.g. "78701"
        """
        key = (first_name.strip().lower(), last_name.strip().lower(), str(zip).strip())
        for user in self.store.users.values():
            if (user.first_name.lower(), user.last_name.lower(), user.address.zip) == key:
                return user.user_id
        raise StoreError(f"no user named {first_name} {last_name} with zip code {zip}")

    def get_user_details(self, user_id: str) -> dict[str, Any]:
        """Get a customer's details: name, email, default address and order ids.

        Args:
            user_id: the user id, e.g. "mia_garcia_1234"
        """
        return attrs.asdict(self.store.user(user_id))

    def list_user_orders(self, user_id: str) -> list[dict[str, Any]]:
        """List a customer's orders with their status and number of items.

        Args:
            user_id: the user id, e.g. "mia_garcia_1234"
        """
        orders = [self.store.order(o) for o in self.store.user(user_id).orders]
        return [{"order_id": o.order_id, "status": o.status, "items": len(o.items)} for o in orders]

    def get_order_details(self, order_id: str) -> dict[str, Any]:
        """Get an order's status, shipping address and items (with their item ids).

        Args:
            order_id: the order id, starting with "#", e.g. "#W1234567"
        """
        return _order_view(self.store.order(order_id))

    def get_product_details(self, product_id: str) -> dict[str, Any]:
        """Get a product's name and variants (item ids, options and prices).

        Args:
            product_id: the product id, e.g. "1234567890"
        """
        try:
            return attrs.asdict(self.store.products[product_id])
        except KeyError:
            raise StoreError(f"no product with id {product_id!r}") from None

    def cancel_pending_order(
        self, order_id: str, reason: Literal["no longer needed", "ordered by mistake"]
    ) -> dict[str, Any]:
        """Cancel a pending order. Only pending orders can be cancelled.

        Args:
            order_id: the order id, starting with "#", e.g. "#W1234567"
            reason: why the customer cancels: "no longer needed" or "ordered by mistake"
        """
        order = self._pending(order_id, "cancelled")
        if reason not in CANCEL_REASONS:
            raise StoreError(f"reason must be one of {', '.join(map(repr, CANCEL_REASONS))}")
        order.status, order.cancel_reason = "cancelled", reason
        return _order_view(order)

    def modify_pending_order_address(
        self,
        order_id: str,
        address1: str,
        city: str,
        state: str,
        zip: str,
        address2: str = "",
        country: str = "USA",
    ) -> dict[str, Any]:
        """Change the shipping address of a pending order. Only pending orders can be
        modified.

        Args:
            order_id: the order id, starting with "#", e.g. "#W1234567"
            address1: the street line, e.g. "12 Oak Avenue"
            city: the city, e.g. "Austin"
            state: the two-letter state code, e.g. "TX"
            zip: the zip code, e.g. "78701"
            address2: the apartment or suite, e.g. "Apt 4" (empty if none)
            country: the country, e.g. "USA"
        """
        order = self._pending(order_id, "modified")
        fields = (address1, address2, city, state, zip, country)
        order.address = Address(*(str(f).strip() for f in fields))
        return _order_view(order)

    def return_delivered_order_items(self, order_id: str, item_ids: list[str]) -> dict[str, Any]:
        """Request the return of some items of a delivered order. Only delivered orders
        can be returned; the order's status becomes "return requested".

        Args:
            order_id: the order id, starting with "#", e.g. "#W1234567"
            item_ids: the item ids to return (from get_order_details), e.g. ["1234567890"]
        """
        order = self.store.order(order_id)
        if order.status != "delivered":
            raise StoreError(
                f"order {order.order_id} is {order.status}: only delivered orders can be returned"
            )
        ids = [str(i) for i in item_ids]
        known = {item.item_id for item in order.items}
        unknown = [i for i in ids if i not in known]
        if not ids or unknown or len(set(ids)) != len(ids):
            raise StoreError(
                f"item_ids must name distinct items of order {order.order_id} "
                f"({', '.join(sorted(known))}); got {ids}"
            )
        order.status, order.return_items = "return requested", sorted(ids)
        return _order_view(order)

    def _pending(self, order_id: str, verb: str) -> Order:
        order = self.store.order(order_id)
        if order.status != "pending":
            raise StoreError(
                f"order {order.order_id} is {order.status}: only pending orders can be {verb}"
            )
        return order
