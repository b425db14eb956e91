"""``retail-lite``: the tau-bench shape, offline. A customer-service agent with tools
over a small deterministic store; each task is one customer's goal.

Task ``i`` draws a seed from ``(config.seed, i)``; the seed makes the store (users,
orders, products: ``taketurns.envs.retail_store``) and the customer's goal, one of ``kinds``:

- ``cancel``: cancel a pending order, for a reason the customer gives;
- ``address``: change the shipping address of a pending order;
- ``return``: return some items of a delivered order (named as the customer would);
- ``status``: ask for the status of an order (an info task: ``answer`` is the status).

The prompt is the customer's request, with enough to act on (who they are: name and
email, or name and zip code; which order; what they want), so the task runs one-shot
under the single-agent env or as the modeled user's scenario under ``user-sim``.
``info["actions"]`` are the tool calls that fulfil the goal; applied to a fresh copy
of the store they give ``info["expected_state"]`` (the store's digest).

Scoring is state-based, as tau-bench scores: ``success`` (the one reward) is
``state_match * info_match``, so only a fully correct rollout earns 1.0 and any wrong
write (cancelling the wrong order, a wrong reason, a typo in the address) earns 0.0;
both parts are recorded as metrics.

With ``tools = "mcp"`` the same store and tools are served over a real tool protocol:
each rollout starts its own MCP stdio server (``taketurns.envs.retail_mcp``, seeded
like the in-process store) and the rubric reads the final store's digest from the
server's ``retail://store/digest`` resource; the rewards are the same.
"""

from __future__ import annotations

import importlib.util
import random
import re
import sys
from collections.abc import Sequence
from typing import Any

import attrs

from taketurns import (
    AssistantMessage,
    OptionError,
    Resources,
    Rubric,
    Task,
    Taskset,
    TasksetConfig,
    Trace,
    metric,
    reward,
)
from taketurns.envs.retail_store import (
    CANCEL_REASONS,
    RetailTools,
    Store,
    User,
    describe,
    random_address,
)
from taketurns.errors import ScoringError
from taketurns.harness import McpServer, text_of

__all__ = [
    "KINDS",
    "POLICY",
    "Goal",
    "RetailConfig",
    "RetailLite",
    "expected_state",
    "make_goal",
    "task_seed",
]

KINDS = ("cancel", "address", "status", "return")

POLICY = (
    "You are a customer-service agent of an online retail store. Help the customer "
    "with their request using the tools. First find the customer's user id (by email, "
    "or by first name, last name and zip code) and check the order belongs to them. "
    "Rules: only pending orders can be cancelled or have their shipping address "
    "changed; only delivered orders can have items returned; a cancellation reason is "
    f"either {CANCEL_REASONS[0]!r} or {CANCEL_REASONS[1]!r}. Do exactly what the "
    "customer asks and change nothing else. When you are done, tell the customer the "
    "outcome in plain words."
)

_REASON_TEXT = {
    "no longer needed": "I no longer need it",
    "ordered by mistake": "I ordered it by mistake",
}
_ALIASES = {"cancelled": ("cancelled", "canceled")}


def _an_int(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise OptionError(attribute.name, value, "an integer")


def _kinds(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    accepted = f"a comma-separated list of goal kinds from: {', '.join(KINDS)}"
    if not isinstance(value, str):
        raise OptionError(attribute.name, value, accepted)
    names = [k.strip() for k in value.split(",")]
    if not names or any(k not in KINDS for k in names):
        raise OptionError(attribute.name, value, accepted)


def _tools(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in TOOLS:
        raise OptionError(attribute.name, value, " or ".join(TOOLS))
    if value == "mcp" and importlib.util.find_spec("mcp") is None:
        raise OptionError(
            attribute.name, value, "python (the MCP SDK is missing: pip install 'taketurns[mcp]')"
        )


TOOLS = ("python", "mcp")
MCP_NAME = "retail"  # the per-rollout server's name in state["mcp"]


@attrs.define
class RetailConfig(TasksetConfig):
    """``seed`` varies every store and goal (unset: the run's ``--seed``); ``kinds``
    (comma-separated) are the goal kinds, dealt to tasks in turn (task ``i`` gets kind
    ``i % len(kinds)``); ``tools``: ``python`` (in process) or ``mcp`` (the store behind
    a per-rollout MCP server)."""

    seed: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(_an_int),
        metadata={"unset": "the run's --seed"},
    )
    kinds: str = attrs.field(default=",".join(KINDS), validator=_kinds)
    tools: str = attrs.field(default="python", validator=_tools)

    @property
    def kind_list(self) -> list[str]:
        return [k.strip() for k in self.kinds.split(",")]


def task_seed(seed: int, idx: int) -> int:
    """The seed of task ``idx`` under config seed ``seed`` (stable across runs)."""
    return random.Random(f"retail-lite/{seed}/{idx}").getrandbits(31)


@attrs.frozen
class Goal:
    """What one customer wants: the request they make and the tool calls that do it."""

    kind: str
    user_id: str
    order_id: str
    prompt: str
    actions: tuple[dict[str, Any], ...] = ()
    answer: str | None = None


def _identity(user: User, rng: random.Random) -> str:
    name = f"{user.first_name} {user.last_name}"
    if rng.random() < 0.5:
        return f"Hi, this is {name} (email: {user.email})."
    return f"Hi, this is {name}, zip code {user.address.zip}."


def make_goal(store: Store, kind: str, rng: random.Random) -> Goal:
    """Draw a goal of ``kind`` for one of the store's customers."""
    wanted = {"cancel": "pending", "address": "pending", "return": "delivered"}.get(kind)
    orders = sorted(
        (o for o in store.orders.values() if wanted is None or o.status == wanted),
        key=lambda o: o.order_id,
    )
    order = rng.choice(orders)
    me = _identity(store.user(order.user_id), rng)
    oid = order.order_id

    def goal(prompt: str, action: str | None = None, **arguments: Any) -> Goal:
        actions = ({"name": action, "arguments": {"order_id": oid, **arguments}},)
        answer = order.status if kind == "status" else None
        return Goal(kind, order.user_id, oid, prompt, actions if action else (), answer)

    if kind == "cancel":
        reason = rng.choice(CANCEL_REASONS)
        text = f"{me} Please cancel my order {oid}, {_REASON_TEXT[reason]}."
        return goal(text, "cancel_pending_order", reason=reason)
    if kind == "address":
        new = random_address(rng)
        while new == order.address:
            new = random_address(rng)
        text = f"{me} Please change the shipping address of my order {oid} to {new.line()}."
        return goal(text, "modify_pending_order_address", **attrs.asdict(new))
    if kind == "return":
        items = rng.sample(order.items, rng.randint(1, min(2, len(order.items))))
        names = " and the ".join(describe(i) for i in items)
        text = f"{me} My order {oid} was delivered and I would like to return the {names}."
        return goal(text, "return_delivered_order_items", item_ids=[i.item_id for i in items])
    if kind == "status":
        return goal(f"{me} What is the status of my order {oid}?")
    raise ValueError(f"unknown goal kind {kind!r}; kinds: {', '.join(KINDS)}")


def expected_state(store: Store, actions: Sequence[dict[str, Any]]) -> Store:
    """``actions`` applied, through the tools, to a copy of ``store``."""
    final = store.copy()
    tools = RetailTools(final)
    for action in actions:
        getattr(tools, action["name"])(**action["arguments"])
    return final


def _mentions(text: str, fact: str) -> bool:
    spellings = _ALIASES.get(fact.lower(), (fact,))
    return any(re.search(rf"\b{re.escape(s)}\b", text, re.IGNORECASE) for s in spellings)


class RetailLite(Taskset):
    """Customer-service goals over a seeded store, scored by the final store state."""

    config_class = RetailConfig
    harness = "tools"

    def tasks(self, num_tasks: int) -> Sequence[Task]:
        return [self.task(i) for i in range(num_tasks)]

    def task(self, idx: int) -> Task:
        """Task ``idx``: its store and goal come from ``task_seed(config.seed, idx)``."""
        kinds = self.config.kind_list
        kind = kinds[idx % len(kinds)]
        seed = task_seed(self.seed_of(self.config.seed), idx)
        store = Store.generate(seed)
        goal = make_goal(store, kind, random.Random(f"{seed}/goal"))
        info = {
            "seed": seed,
            "kind": kind,
            "user_id": goal.user_id,
            "order_id": goal.order_id,
            "actions": [dict(a) for a in goal.actions],
            "expected_state": expected_state(store, goal.actions).digest(),
        }
        return Task(
            idx,
            f"retail-lite/{idx}/{kind}",
            goal.prompt,
            system_prompt=POLICY,
            answer=goal.answer,
            info=info,
        )

    def resources(self, task: Task) -> Resources:
        """A fresh store for the task, the tools bound to it, and ``state["store"]``
        (with ``tools = "mcp"``: nothing; the store lives in the task's MCP server)."""
        if self.config.tools == "mcp":
            return Resources()
        store = Store.generate(task.info["seed"])
        return Resources(tools=RetailTools(store).all(), state={"store": store})

    def mcp_servers(self, task: Task | None) -> Sequence[McpServer]:
        """With ``tools = "mcp"``, a rollout of ``task`` gets its own store server."""
        servers = tuple(self.config.mcp_servers)
        if self.config.tools != "mcp" or task is None:
            return servers
        command = [sys.executable, "-m", "taketurns.envs.retail_mcp"]
        own = McpServer(MCP_NAME, command=[*command, "--seed", str(task.info["seed"])])
        return (own, *servers)

    def rubric(self) -> Rubric:
        """``success``, ``state_match``, ``info_match``; read from the MCP server's
        digest resource with ``tools = "mcp"``."""
        return Rubric.of(_RemoteScoring(self)) if self.config.tools == "mcp" else super().rubric()

    @reward
    def success(self, task: Task, trace: Trace) -> float:
        """1.0 only when the final store is the expected one and the info was given."""
        return self.state_match(task, trace) * self.info_match(task, trace)

    @metric
    def state_match(self, task: Task, trace: Trace) -> float:
        """1.0 iff the rollout's final store equals the expected final store."""
        store = trace.state.get("store")
        if not isinstance(store, Store):
            raise ScoringError(
                "trace.state has no 'store': run retail-lite tasks with the taskset's "
                "resources (agent.run(task, tools=r.tools, state=r.state))"
            )
        return float(store.digest() == task.info["expected_state"])

    @metric
    def info_match(self, task: Task, trace: Trace) -> float:
        """For an info task, 1.0 iff some assistant reply states the expected fact
        (as tau-bench checks outputs); 1.0 for tasks with nothing to tell."""
        if task.answer is None:
            return 1.0
        said = "\n".join(
            text_of(m.content) for m in trace.messages if isinstance(m, AssistantMessage)
        )
        return float(_mentions(said, str(task.answer)))


class _RemoteScoring:
    """retail-lite's rubric when the store lives in the rollout's MCP server: the same
    scorers, the final store's digest read from ``retail://store/digest``."""

    def __init__(self, taskset: RetailLite) -> None:
        self.taskset = taskset

    @reward
    async def success(self, task: Task, trace: Trace) -> float:
        """1.0 only when the final store is the expected one and the info was given."""
        return await self.state_match(task, trace) * self.info_match(task, trace)

    @metric
    async def state_match(self, task: Task, trace: Trace) -> float:
        """1.0 iff the rollout's final store (in its MCP server) is the expected one."""
        from taketurns.envs.retail_mcp import DIGEST_URI

        connection = trace.state.get("mcp", {}).get(MCP_NAME)
        if connection is None:
            raise ScoringError(
                "trace.state has no 'mcp' connection to the retail server: run the tasks "
                "with the taskset's resources (async with taskset.open_resources(task))"
            )
        digest = await connection.read_resource(DIGEST_URI)
        return float(digest == task.info["expected_state"])

    @metric
    def info_match(self, task: Task, trace: Trace) -> float:
        """As in process: the expected fact stated (1.0 when there is none)."""
        return self.taskset.info_match(task, trace)
