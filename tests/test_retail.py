"""retail-lite: the seeded store, its tools and rules, the goals and their expected
states, and state-based scoring, driven through the public API with real agents (a
scripted clerk that works from the conversation, the built-in ``tools`` policy) alone,
under ``user-sim`` and end to end through the CLI."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from scripted import ScriptedModel, tool_call

from taketurns import (
    Agent,
    AgentConfig,
    AssistantMessage,
    ConfigError,
    Episode,
    Message,
    OptionError,
    Task,
    Tool,
    ToolMessage,
    Trace,
    UserMessage,
)
from taketurns.env import EpisodeInfo, ModelClient, ModelRequest, ModelResponse
from taketurns.envs.retail import KINDS, POLICY, RetailConfig, RetailLite, expected_state, task_seed
from taketurns.envs.retail_store import RetailTools, Store, StoreError, describe
from taketurns.harness import ToolCall, text_of
from taketurns.taskset import open_taskset, taskset_registry
from taketurns.testing import run_episode

SEEDS = (0, 1, 2, 7)
HAS_SINGLE = importlib.util.find_spec("taketurns.envs.single") is not None
HAS_USER_SIM = importlib.util.find_spec("taketurns.envs.user_sim") is not None


def task_of(kind: str, seed: int = 0, nth: int = 0) -> Task:
    """The ``nth`` task of ``kind`` under config seed ``seed``."""
    return RetailLite(RetailConfig(seed=seed, kinds=kind)).tasks(nth + 1)[nth]


def tools_of(store: Store) -> dict[str, Callable[..., Any]]:
    return {fn.__name__: fn for fn in RetailTools(store).all()}


# --- a scripted clerk: reads the customer's words, uses the tools, reports ----------

_ADDRESS = re.compile(
    r"order #W\d{7} to (?P<address1>[^,]+)(?:, (?P<address2>[^,]+))?, (?P<city>[^,]+), "
    r"(?P<state>[A-Z]{2}) (?P<zip>\d{5}), (?P<country>[^,.]+)\."
)


class Clerk(ModelClient):
    """A scripted assistant that does what the customer asked, the way a careful agent
    would: identify the customer, look the order up, act, then tell the outcome. It
    knows nothing of the task row: everything comes from the messages it is sent."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        self.requests.append(request)
        message = self.reply(request.messages)
        return ModelResponse(message, finish_reason="tool_calls" if message.tool_calls else "stop")

    def reply(self, messages: Sequence[Message]) -> AssistantMessage:
        said = "\n".join(text_of(m.content) for m in messages if isinstance(m, UserMessage))
        results = _results_since_last_user(messages)
        order_id = re.search(r"#W\d{7}", said)
        assert order_id, f"the customer never named an order: {said!r}"
        steps = [_identify(said), ("get_order_details", {"order_id": order_id.group()})]
        if len(results) < len(steps):
            return _call(*steps[len(results)], n=len(results))
        order = json.loads(results[1])
        action = _action(said, order)
        if action is not None and len(results) == len(steps):
            return _call(*action, n=len(results))
        final = json.loads(results[-1])
        return AssistantMessage(f"All set: order {final['order_id']} is {final['status']}.")


def _results_since_last_user(messages: Sequence[Message]) -> list[str]:
    results: list[str] = []
    for m in reversed(messages):
        if isinstance(m, UserMessage):
            break
        if isinstance(m, ToolMessage):
            results.insert(0, text_of(m.content))
    return results


def _identify(said: str) -> tuple[str, dict[str, Any]]:
    by_email = re.search(r"\(email: (\S+)\)", said)
    if by_email:
        return "find_user_id_by_email", {"email": by_email.group(1)}
    who = re.search(r"this is (\w+) (\w+), zip code (\d{5})", said)
    assert who, f"the customer never said who they are: {said!r}"
    first, last, zip_code = who.groups()
    return "find_user_id_by_name_zip", {"first_name": first, "last_name": last, "zip": zip_code}


def _action(said: str, order: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    oid = order["order_id"]
    if "cancel my order" in said:
        reason = "no longer needed" if "no longer need" in said else "ordered by mistake"
        return "cancel_pending_order", {"order_id": oid, "reason": reason}
    if "shipping address" in said:
        found = _ADDRESS.search(said)
        assert found, said
        fields = {k: v for k, v in found.groupdict().items() if v is not None}
        return "modify_pending_order_address", {"order_id": oid, **fields}
    if "return the" in said:
        names = {
            f"{i['name']} ({', '.join(f'{k}: {v}' for k, v in i['options'].items())})": i
            for i in order["items"]
        }
        ids = [item["item_id"] for name, item in names.items() if name in said]
        return "return_delivered_order_items", {"order_id": oid, "item_ids": ids}
    return None


def _call(name: str, arguments: dict[str, Any], *, n: int) -> AssistantMessage:
    return AssistantMessage(None, (ToolCall(f"call_{n}", name, json.dumps(arguments)),))


def clerk_agent(taskset: RetailLite, client: ModelClient | None = None) -> Agent:
    return Agent(
        "assistant",
        AgentConfig(model="scripted", harness="tools"),
        client=client if client is not None else Clerk(),
        rubric=taskset.rubric(),
    )


async def run_task(taskset: RetailLite, task: Task, client: ModelClient | None = None) -> Trace:
    resources = taskset.resources(task)
    agent = clerk_agent(taskset, client)
    return await agent.run(task, tools=resources.tools, state=resources.state)


# --- the store ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_one_seed_is_one_store(seed: int) -> None:
    a, b = Store.generate(seed), Store.generate(seed)
    assert a == b
    assert a.digest() == b.digest()
    assert a.snapshot() == b.snapshot()
    assert Store.generate(seed + 1).digest() != a.digest()


@pytest.mark.parametrize("seed", SEEDS)
def test_the_store_is_well_formed(seed: int) -> None:
    store = Store.generate(seed)
    assert len(store.users) == 5
    assert len({u.email for u in store.users.values()}) == len(store.users)
    for user in store.users.values():
        assert re.fullmatch(r"[a-z]+_[a-z]+_\d{4}", user.user_id)
        assert re.fullmatch(r"\d{5}", user.address.zip)
        statuses = {store.order(o).status for o in user.orders}
        assert {"pending", "delivered"} <= statuses
    for order_id, order in store.orders.items():
        assert re.fullmatch(r"#W\d{7}", order_id)
        assert order_id in store.user(order.user_id).orders
        assert order.status in ("pending", "delivered", "cancelled")
        assert 1 <= len(order.items) <= 3
        assert len({i.item_id for i in order.items}) == len(order.items)
        for item in order.items:
            assert item in store.products[item.product_id].variants


def test_a_copy_is_independent() -> None:
    store = Store.generate(3)
    copy = store.copy()
    pending = next(o for o in copy.orders.values() if o.status == "pending")
    RetailTools(copy).cancel_pending_order(pending.order_id, "no longer needed")
    assert copy != store
    assert copy.digest() != store.digest()
    assert store.order(pending.order_id).status == "pending"


# --- the tools and the store's rules ------------------------------------------------


def test_finding_users() -> None:
    store = Store.generate(0)
    tools = tools_of(store)
    for user in store.users.values():
        assert tools["find_user_id_by_email"](f" {user.email.upper()} ") == user.user_id
        found = tools["find_user_id_by_name_zip"](user.first_name, user.last_name, user.address.zip)
        assert found == user.user_id
    with pytest.raises(StoreError, match="no user with email"):
        tools["find_user_id_by_email"]("nobody@example.com")
    with pytest.raises(StoreError, match="no user named"):
        tools["find_user_id_by_name_zip"]("No", "Body", "00000")


def test_details_and_listings() -> None:
    store = Store.generate(0)
    tools = tools_of(store)
    user = next(iter(store.users.values()))
    details = tools["get_user_details"](user.user_id)
    assert details["email"] == user.email
    assert details["orders"] == user.orders
    listing = tools["list_user_orders"](user.user_id)
    assert [o["order_id"] for o in listing] == user.orders
    order = tools["get_order_details"](user.orders[0])
    assert order == tools["get_order_details"](user.orders[0].lstrip("#"))
    assert {"order_id", "user_id", "address", "items", "status"} <= set(order)
    product_id = order["items"][0]["product_id"]
    assert tools["get_product_details"](product_id)["name"] == order["items"][0]["name"]
    with pytest.raises(StoreError, match="no order with id"):
        tools["get_order_details"]("#W0000000x")
    with pytest.raises(StoreError, match="no user with id"):
        tools["list_user_orders"]("nobody_0000")


def _orders(store: Store, status: str) -> list[str]:
    return [o.order_id for o in store.orders.values() if o.status == status]


def test_cancel_rules() -> None:
    store = Store.generate(1)
    tools = tools_of(store)
    delivered, pending = _orders(store, "delivered")[0], _orders(store, "pending")[0]
    with pytest.raises(StoreError, match="is delivered: only pending orders can be cancelled"):
        tools["cancel_pending_order"](delivered, "no longer needed")
    with pytest.raises(StoreError, match="reason must be one of"):
        tools["cancel_pending_order"](pending, "changed my mind")
    assert store.order(pending).status == "pending"
    result = tools["cancel_pending_order"](pending, "ordered by mistake")
    assert result["status"] == "cancelled"
    assert result["cancel_reason"] == "ordered by mistake"
    with pytest.raises(StoreError, match="is cancelled: only pending orders"):
        tools["cancel_pending_order"](pending, "ordered by mistake")


def test_address_rules() -> None:
    store = Store.generate(1)
    tools = tools_of(store)
    modify = tools["modify_pending_order_address"]
    delivered, pending = _orders(store, "delivered")[0], _orders(store, "pending")[0]
    with pytest.raises(StoreError, match="only pending orders can be modified"):
        modify(delivered, "1 Main Street", "Austin", "TX", "78701")
    result = modify(pending, " 1 Main Street ", "Austin", "TX", 78701, address2="Apt 2")
    assert result["address"] == {
        "address1": "1 Main Street",
        "address2": "Apt 2",
        "city": "Austin",
        "state": "TX",
        "zip": "78701",
        "country": "USA",
    }
    assert store.order(pending).status == "pending"


def test_return_rules() -> None:
    store = Store.generate(2)
    tools = tools_of(store)
    give_back = tools["return_delivered_order_items"]
    delivered, pending = _orders(store, "delivered")[0], _orders(store, "pending")[0]
    item = store.order(delivered).items[0].item_id
    with pytest.raises(StoreError, match="is pending: only delivered orders can be returned"):
        give_back(pending, [store.order(pending).items[0].item_id])
    for bad in ([], ["0000000000"], [item, item]):
        with pytest.raises(StoreError, match="item_ids must name distinct items"):
            give_back(delivered, bad)
    result = give_back(delivered, [item])
    assert result["status"] == "return requested"
    assert result["return_items"] == [item]


async def test_the_model_sees_rule_errors_as_tool_answers() -> None:
    store = Store.generate(1)
    cancel = Tool(RetailTools(store).cancel_pending_order)
    delivered = _orders(store, "delivered")[0]
    args = json.dumps({"order_id": delivered, "reason": "no longer needed"})
    answer = await cancel.call(ToolCall("c1", "cancel_pending_order", args))
    assert answer.content == (
        f"Error: StoreError: order {delivered} is delivered: only pending orders can be cancelled"
    )


def test_tool_schemas_describe_every_parameter() -> None:
    for fn in RetailTools(Store.generate(0)).all():
        schema = Tool(fn).schema["function"]
        assert schema["description"], fn.__name__
        for name, prop in schema["parameters"]["properties"].items():
            assert prop.get("description"), f"{fn.__name__}.{name}"
    cancel = Tool(RetailTools(Store.generate(0)).cancel_pending_order).schema["function"]
    reason = cancel["parameters"]["properties"]["reason"]
    assert reason["enum"] == ["no longer needed", "ordered by mistake"]
    address = Tool(RetailTools(Store.generate(0)).modify_pending_order_address).schema
    assert address["function"]["parameters"]["required"] == [
        "order_id",
        "address1",
        "city",
        "state",
        "zip",
    ]


# --- tasks, goals and expected states -----------------------------------------------


def test_tasks_are_deterministic_and_deal_kinds_in_turn() -> None:
    tasks = RetailLite().tasks(8)
    assert tasks == RetailLite().tasks(8)
    assert [t.info["kind"] for t in tasks] == [*KINDS, *KINDS]
    assert [t.idx for t in tasks] == list(range(8))
    assert all(t.system_prompt == POLICY for t in tasks)
    assert [t.info["seed"] for t in tasks] == [task_seed(0, i) for i in range(8)]
    other = RetailLite(RetailConfig(seed=1)).tasks(8)
    assert [t.info["seed"] for t in other] != [t.info["seed"] for t in tasks]
    only = RetailLite(RetailConfig(kinds="status, return")).tasks(4)
    assert [t.info["kind"] for t in only] == ["status", "return", "status", "return"]
    json.dumps([attrs.asdict(t) for t in tasks])  # the rows are JSON-able


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_prompt_holds_enough_to_act(kind: str, seed: int) -> None:
    task = task_of(kind, seed)
    store = Store.generate(task.info["seed"])
    user, order = store.user(task.info["user_id"]), store.order(task.info["order_id"])
    prompt = str(task.prompt)
    assert f"{user.first_name} {user.last_name}" in prompt
    assert user.email in prompt or f"zip code {user.address.zip}" in prompt
    assert order.order_id in prompt
    (action,) = task.info["actions"] or [None]
    if kind == "cancel":
        assert order.status == "pending"
        reason = action["arguments"]["reason"]
        assert ("no longer need" in prompt) == (reason == "no longer needed")
    elif kind == "address":
        assert order.status == "pending"
        arguments = action["arguments"]
        assert all(arguments[k] in prompt for k in ("address1", "city", "state", "zip"))
    elif kind == "return":
        assert order.status == "delivered"
        by_id = {i.item_id: i for i in order.items}
        assert all(describe(by_id[i]) in prompt for i in action["arguments"]["item_ids"])
    else:
        assert action is None
        assert task.answer == order.status


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_expected_state_applies_the_goal_to_a_fresh_store(kind: str, seed: int) -> None:
    task = task_of(kind, seed)
    fresh = Store.generate(task.info["seed"])
    expected = expected_state(fresh, task.info["actions"])
    assert expected.digest() == task.info["expected_state"]
    assert fresh == Store.generate(task.info["seed"])  # the fresh store is untouched
    assert (expected == fresh) == (kind == "status")
    if kind != "status":
        changed = [o for o in expected.orders if expected.orders[o] != fresh.orders[o]]
        assert changed == [task.info["order_id"]]
    # the rollout's own store (from resources) reaches the same state by the same calls
    resources = RetailLite().resources(task)
    tools = {fn.__name__: fn for fn in resources.tools}
    for action in task.info["actions"]:
        tools[action["name"]](**action["arguments"])
    assert resources.state["store"].digest() == task.info["expected_state"]


def test_resources_are_fresh_per_rollout() -> None:
    taskset, task = RetailLite(), task_of("cancel")
    a, b = taskset.resources(task), taskset.resources(task)
    assert a.state["store"] is not b.state["store"]
    assert a.state["store"] == b.state["store"]
    a.tools[6](**task.info["actions"][0]["arguments"])  # cancel_pending_order
    assert a.state["store"] != b.state["store"]


# --- config ---------------------------------------------------------------------------


def test_config_is_validated_by_field() -> None:
    with pytest.raises(OptionError, match="kinds = 'cancel,bogus'"):
        RetailConfig(kinds="cancel,bogus")
    with pytest.raises(OptionError, match="kinds = ''"):
        RetailConfig(kinds="")
    with pytest.raises(OptionError, match="seed = 'x'"):
        RetailConfig(seed="x")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"env\.taskset\.kinds = 'nope'.*cancel, address"):
        open_taskset({"id": "retail-lite", "kinds": "nope"})
    with pytest.raises(ConfigError, match=r"env\.taskset\.size: unknown option"):
        open_taskset({"id": "retail-lite", "size": 3})
    taskset = open_taskset({"id": "retail-lite", "seed": 4, "kinds": "return"})
    assert isinstance(taskset, RetailLite)
    assert taskset.config == RetailConfig(seed=4, kinds="return")
    assert taskset_registry.get("retail-lite") is RetailLite
    assert RetailLite.harness == "tools"


# --- scoring with real agents ---------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("kind", KINDS)
async def test_a_scripted_clerk_reaches_reward_1(kind: str, seed: int) -> None:
    taskset = RetailLite(RetailConfig(seed=seed, kinds=kind))
    for task in taskset.tasks(2):
        trace = await run_task(taskset, task)
        assert trace.errors == []
        assert trace.stop_condition == "agent_completed"
        assert trace.rewards == {"success": 1.0}
        assert trace.reward == 1.0
        assert trace.metrics == {"state_match": 1.0, "info_match": 1.0}
        called = [
            c.name for m in trace.messages if isinstance(m, AssistantMessage) for c in m.tool_calls
        ]
        assert called[1] == "get_order_details"
        assert called[2:] == [a["name"] for a in task.info["actions"]]


async def test_the_clerk_was_offered_the_tools_and_the_policy() -> None:
    clerk = Clerk()
    await run_task(RetailLite(), task_of("cancel"), clerk)
    request = clerk.requests[0]
    assert text_of(request.messages[0].content) == POLICY
    offered = [t["function"]["name"] for t in request.tools]
    assert offered == [fn.__name__ for fn in RetailTools(Store.generate(0)).all()]


def _scripted(*calls: tuple[str, dict[str, Any]], final: str = "Done.") -> ScriptedModel:
    items = [tool_call(f"c{i}", name, json.dumps(args)) for i, (name, args) in enumerate(calls)]
    return ScriptedModel(*items, final)


def _other_pending(task: Task) -> str:
    store = Store.generate(task.info["seed"])
    mine = store.user(task.info["user_id"]).orders
    others = [o for o in _orders(store, "pending") if o != task.info["order_id"]]
    return next((o for o in others if o in mine), others[0])


async def test_wrong_writes_score_0() -> None:
    taskset = RetailLite()
    cancel, address = task_of("cancel"), task_of("address")
    right = cancel.info["actions"][0]["arguments"]
    other_reason = next(
        r for r in ("no longer needed", "ordered by mistake") if r != right["reason"]
    )
    wrong_runs = {
        "the wrong order": (
            cancel,
            ("cancel_pending_order", {**right, "order_id": _other_pending(cancel)}),
        ),
        "the wrong reason": (cancel, ("cancel_pending_order", {**right, "reason": other_reason})),
        "a typo in the address": (
            address,
            (
                "modify_pending_order_address",
                {**address.info["actions"][0]["arguments"], "city": "Austn"},
            ),
        ),
        "the right action twice over two orders": (
            cancel,
            ("cancel_pending_order", right),
            ("cancel_pending_order", {**right, "order_id": _other_pending(cancel)}),
        ),
    }
    for why, (task, *calls) in wrong_runs.items():
        trace = await run_task(taskset, task, _scripted(*calls))
        assert trace.errors == [], why
        assert trace.metrics["state_match"] == 0.0, why
        assert trace.reward == 0.0, why


async def test_doing_nothing_scores_0_and_the_right_call_scores_1() -> None:
    taskset, task = RetailLite(), task_of("cancel", 3)
    idle = await run_task(taskset, task, ScriptedModel("I cannot help with that."))
    assert idle.reward == 0.0
    assert idle.metrics == {"state_match": 0.0, "info_match": 1.0}
    action = task.info["actions"][0]
    done = await run_task(taskset, task, _scripted((action["name"], action["arguments"])))
    assert done.reward == 1.0


async def test_an_info_task_needs_the_fact_and_an_untouched_store() -> None:
    taskset, task = RetailLite(), task_of("status", 1)
    status = str(task.answer)
    wrong = next(s for s in ("pending", "delivered", "cancelled") if s != status)
    lookup = ("get_order_details", {"order_id": task.info["order_id"]})
    told = await run_task(taskset, task, _scripted(lookup, final=f"It is {status.upper()}."))
    assert (told.reward, told.metrics) == (1.0, {"state_match": 1.0, "info_match": 1.0})
    mistaken = await run_task(taskset, task, _scripted(lookup, final=f"It is {wrong}."))
    assert mistaken.metrics == {"state_match": 1.0, "info_match": 0.0}
    assert mistaken.reward == 0.0
    meddled = await run_task(
        taskset,
        task,
        _scripted(
            (
                "cancel_pending_order",
                {"order_id": _other_pending(task), "reason": "no longer needed"},
            ),
            final=f"It is {status}.",
        ),
    )
    assert meddled.metrics == {"state_match": 0.0, "info_match": 1.0}
    assert meddled.reward == 0.0


async def test_a_rule_error_reaches_the_model_and_changes_nothing() -> None:
    taskset, task = RetailLite(), task_of("return")
    store = Store.generate(task.info["seed"])
    model = _scripted(
        ("cancel_pending_order", {"order_id": task.info["order_id"], "reason": "no longer needed"})
    )
    trace = await run_task(taskset, task, model)
    (result,) = [m for m in trace.messages if isinstance(m, ToolMessage)]
    assert "only pending orders can be cancelled" in text_of(result.content)
    assert trace.state["store"] == store  # the delivered order was not cancelled
    assert trace.metrics["state_match"] == 0.0  # ... and the return was not made
    assert trace.reward == 0.0


async def test_scoring_without_the_store_is_an_error_on_the_trace() -> None:
    taskset = RetailLite()
    agent = clerk_agent(taskset, ScriptedModel("ok"))
    trace = await agent.run(task_of("cancel"))
    assert trace.reward == 0.0
    assert any("trace.state has no 'store'" in e.message for e in trace.errors)


async def test_the_builtin_tools_policy_runs_error_free() -> None:
    taskset = RetailLite()
    agent = Agent(
        "assistant", AgentConfig(model="builtin/tools", harness="tools"), rubric=taskset.rubric()
    )
    for task in taskset.tasks(8):
        resources = taskset.resources(task)
        trace = await agent.run(task, tools=resources.tools, state=resources.state)
        assert trace.errors == [], task.name
        assert trace.stop_condition == "agent_completed"
        assert set(trace.rewards) == {"success"}
        assert 0.0 <= trace.reward <= 1.0
        assert any(isinstance(m, ToolMessage) for m in trace.messages)


# --- under user-sim ---------------------------------------------------------------------


class Customer(ModelClient):
    """A scripted modeled user: states its scenario, then says the done marker."""

    def __init__(self, scenario: str, done: str) -> None:
        self.scenario, self.done = scenario, done

    async def complete(self, request: ModelRequest) -> ModelResponse:
        await trio.lowlevel.checkpoint()
        spoken = any(isinstance(m, AssistantMessage) for m in request.messages)
        return ModelResponse(AssistantMessage(self.done if spoken else self.scenario))


@pytest.mark.skipif(not HAS_USER_SIM, reason="envs/user_sim.py (user-sim) is not in the tree")
@pytest.mark.parametrize("seed", [0, 5])
@pytest.mark.parametrize("kind", KINDS)
async def test_under_user_sim_the_clerk_reaches_reward_1(kind: str, seed: int) -> None:
    from taketurns.envs.user_sim import UserSim, UserSimConfig

    env = UserSim(UserSimConfig(taskset={"id": "retail-lite", "seed": seed, "kinds": kind}))
    (task,) = env.tasks(1)
    clients: dict[str, ModelClient] = {
        "user": Customer(str(task.prompt), env.config.done_marker),
        "assistant": Clerk(),
    }

    def make(
        role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        harness = config.harness or env.default_harness(role)
        return Agent(
            role,
            attrs.evolve(config, model="scripted", harness=harness),
            client=clients[role],
            episode=info,
            rubric=env.rubric(role),
            on_close=on_close,
        )

    episode = Episode(f"user-sim/{task.idx}/0", "user-sim", task)
    await run_episode(env, episode, make)
    assert episode.ok, episode.errors
    assistant = next(t for t in episode.traces if t.agent.name == "assistant")
    assert assistant.errors == []
    assert assistant.masked
    assert assistant.task.prompt is None
    assert assistant.info["ended_by"] == "done"
    assert assistant.rewards == {"success": 1.0}
    assert assistant.metrics["state_match"] == assistant.metrics["info_match"] == 1.0
    assert assistant.metrics["user_turns"] == 1.0
    assert any(isinstance(m, ToolMessage) for m in assistant.messages)


# --- end to end through the CLI ----------------------------------------------------------


def _episodes(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]


@pytest.mark.skipif(not HAS_SINGLE, reason="envs/single.py (single-agent) is not in the tree")
@pytest.mark.parametrize("model", ["builtin/bracket", "builtin/tools"])
def test_eval_retail_lite_end_to_end(tmp_path: Path, model: str) -> None:
    from taketurns._cli.main import main

    out = tmp_path / "run"
    args = ["eval", "retail-lite", "-n", "3", "-o", str(out), "--no-progress", "--model", model]
    assert main(args) == 0
    episodes = _episodes(out)
    assert sorted(e["task"]["idx"] for e in episodes) == [0, 1, 2]
    for e in episodes:
        assert e["ok"], e["errors"]
        (trace,) = e["traces"]
        assert trace["errors"] == []
        assert trace["agent"]["harness"] == "tools"
        assert trace["stop_condition"] == "agent_completed"
        assert set(trace["rewards"]) == {"success"}
        assert set(trace["metrics"]) == {"state_match", "info_match"}
        assert "state" not in trace  # the live store is never written


@pytest.mark.skipif(not HAS_USER_SIM, reason="envs/user_sim.py (user-sim) is not in the tree")
def test_eval_user_sim_over_retail_lite_end_to_end(tmp_path: Path) -> None:
    from taketurns._cli.main import main

    out = tmp_path / "run"
    args = ["eval", "user-sim", "--env.taskset=retail-lite", "-n", "3", "-o", str(out)]
    assert main([*args, "--no-progress", "--model", "builtin/tools"]) == 0
    episodes = _episodes(out)
    assert len(episodes) == 3
    for e in episodes:
        assert e["ok"], e["errors"]
        assistant = next(t for t in e["traces"] if t["agent"]["name"] == "assistant")
        assert assistant["errors"] == []
        assert assistant["agent"]["harness"] == "tools"
        assert set(assistant["rewards"]) == {"success"}
