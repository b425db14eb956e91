"""``faults-pair``: a small two-seat env for fault tests, with a ledger that counts
every session it opens and every time a session is scored (a helper module).

Each task opens with ``task N rollout R`` (the faulty endpoint reads the task off the
conversation). Seats ``a`` and ``b`` relay: a's reply is b's next message and back,
``turns`` rounds, then one round of concurrent turns. A seat whose run stops ends the
episode normally. ``modes`` (task idx -> mode) make tasks misbehave:

- ``env_raises``: ``run`` raises while b's turn is in flight;
- ``reward_raises`` / ``reward_hangs``: a reward raises / sleeps forever (the scoring
  timeout ends it).

The ``counted`` reward is defined first, so it runs before the misbehaving ones.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import attrs
import trio

from taketurns import (
    AgentConfig,
    Agents,
    ChatSession,
    Env,
    EnvConfig,
    Task,
    Trace,
    read_episodes,
    register_env,
    reward,
)


@attrs.define
class PairConfig(EnvConfig):
    a: AgentConfig = attrs.field(factory=AgentConfig)
    b: AgentConfig = attrs.field(factory=AgentConfig)
    turns: int = 2


@attrs.define
class Ledger:
    opened: collections.Counter[tuple[str, str]] = attrs.field(factory=collections.Counter)
    scored: collections.Counter[tuple[str, str]] = attrs.field(factory=collections.Counter)


class EnvBroke(Exception):
    pass


@register_env("faults-pair")
class PairEnv(Env):
    config_class = PairConfig
    config: PairConfig
    # class-level so that `taketurns._cli.main.main`, which builds its own instance, counts too
    ledger: ClassVar[Ledger] = Ledger()
    modes: ClassVar[dict[int, str]] = {}

    @classmethod
    def reset(cls, modes: dict[int, str] | None = None) -> Ledger:
        cls.ledger = Ledger()
        cls.modes = dict(modes or {})
        return cls.ledger

    def tasks(self, num_tasks: int) -> list[Task]:
        modes = self.modes
        return [Task(i, f"pair-{i}", info={"mode": modes.get(i, "ok")}) for i in range(num_tasks)]

    def _open(self, agents: Agents, role: str, task: Task) -> ChatSession:
        agent = agents[role]
        assert agent.episode is not None
        self.ledger.opened[(agent.episode.id, role)] += 1
        return agent.chat(task)

    async def run(self, task: Task, agents: Agents) -> None:
        mode = task.info.get("mode", "ok")
        rollout = agents.a.episode.rollout if agents.a.episode else 0
        async with self._open(agents, "a", task) as sa, self._open(agents, "b", task) as sb:
            message = f"task {task.idx} rollout {rollout}"
            if mode == "env_raises":
                await sa.turn(message)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(sb.turn, message)
                    await trio.sleep(0.02)  # b's model call is in flight
                    raise EnvBroke(f"task {task.idx}: the env broke mid-turn")
            for _ in range(self.config.turns):
                for session in (sa, sb):
                    reply = await session.turn(message)
                    if reply.stopped:
                        return
                    message = reply.text or "(nothing)"
            async with trio.open_nursery() as nursery:  # concurrent turns, one per seat
                nursery.start_soon(sa.turn, f"both, task {task.idx}")
                nursery.start_soon(sb.turn, f"both, task {task.idx}")

    @reward
    def counted(self, task: Task, trace: Trace) -> float:
        self.ledger.scored[(trace.episode.id, trace.agent.name)] += 1
        return 1.0

    @reward
    async def fragile(self, task: Task, trace: Trace) -> float:
        mode = task.info.get("mode")
        if mode == "reward_raises":
            raise ArithmeticError(f"task {task.idx}: the reward broke")
        if mode == "reward_hangs":
            await trio.sleep_forever()
        return 0.5


PLANNED_STOPS = {"completed", "env_error", "episode_timeout", "cancelled"}


def expected_cause(e: dict[str, Any]) -> str | None:
    """The outcome rule (docs/design.md "Outcomes"), written out independently of the
    engine's: the episode's own failure first, then each trace's in order."""
    if e["stop"] in ("env_error", "cancelled"):
        return "env" if e["stop"] == "env_error" else "cancelled"
    for t in e["traces"]:
        if t["stop_condition"] in ("model_error", "harness_error"):
            return t["stop_condition"].split("_")[0]
        for error in t["errors"]:
            if error["kind"] in ("harness", "scoring"):
                return str(error["kind"])
    return None


def episodes_on_disk(run_dir: Path) -> list[dict[str, Any]]:
    return list(read_episodes(run_dir / "episodes.jsonl"))


def check_run(
    run_dir: Path,
    pairs: Iterable[tuple[int, int]] | None,
    ledger: Ledger | None = None,
    *,
    roles: tuple[str, ...] = ("a", "b"),
) -> list[dict[str, Any]]:
    """Every planned (task, rollout) pair is on disk exactly once (``pairs`` None: each
    pair at most once), ok or with its error and stop condition; every session the env
    opened was closed (has a stop condition) and scored exactly once. Returns the
    episodes."""
    episodes = episodes_on_disk(run_dir)
    on_disk = sorted((e["task"]["idx"], e["rollout"]) for e in episodes)
    assert len(set(on_disk)) == len(on_disk), "an episode was written twice"
    if pairs is not None:
        assert on_disk == sorted(pairs), "an episode was lost or written twice"
    for e in episodes:
        assert e["stop"] in PLANNED_STOPS
        assert e["ok"] == (e["cause"] is None), e["stop"]
        assert e["cause"] == expected_cause(e), e["id"]
        if e["stop"] != "completed":
            assert e["errors"], f"{e['id']} stopped without an error"
        for trace in e["traces"]:
            assert trace["stop_condition"], f"{e['id']}/{trace['agent']['name']} not closed"
            assert trace["agent"]["name"] in roles
            assert trace["episode"]["id"] == e["id"]
    if ledger is not None:
        traces = collections.Counter(
            (e["id"], t["agent"]["name"]) for e in episodes for t in e["traces"]
        )
        assert ledger.opened == traces, "a session the env opened is missing from disk"
        assert ledger.scored == traces, "a session was not scored exactly once"
        assert set(traces.values()) <= {1}
        for e in episodes:
            for t in e["traces"]:
                assert t["rewards"]["counted"] == 1.0
    return episodes


def summary_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())
