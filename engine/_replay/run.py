"""Replaying a run directory's recorded episodes: the env re-driven, each seat
answered by its recorded replies (``_replay.model``), each replayed record compared
with the recorded one (``_replay.difference``).

``prepare_replay`` reads the run back (``_output.recorded``: its config, env and
episodes; the last record of an episode id counts, as after a ``--resume``), picks
the episodes asked for and builds the plan; it refuses, before anything runs, a
directory that is no eval's, an unknown episode id, and a seat whose harness cannot
be replayed (``Harness.replay_refusal``: the agent CLIs). ``replay_episodes`` then
plays them through the eval's own episode loop (``_eval.play``: env setup, services,
interception server for out-of-process programs, concurrency), on the recorded tasks,
once each (no episode retries), judges calling the run's endpoints as in ``rescore``.

Each episode ends as one ``ReplayResult``:

- ``diverged``: the env asked a seat for a call its record does not hold (``ReplayDiverged``
  stopped it), left recorded calls unmade, or the replayed record differs from the
  recorded one (a reward, a metric, a stop condition...: ``Difference``);
- ``failed``: the replayed episode failed (an env error, a harness crash) where the
  recorded one did not fail the same way;
- ``reproduced``: none of that: the record is the same but for ids and timing.

An episode ended by a timeout is not reproduced by design: replies come at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from taketurns._config.options import AgentConfig, EvalConfig
from taketurns._errors import ConfigError
from taketurns._eval.env import Env
from taketurns._eval.episode import Episode
from taketurns._eval.plan import Plan
from taketurns._eval.play import play_pairs
from taketurns._exchange.agent import Agent
from taketurns._exchange.outcome import DIVERGENCE, describe_cause
from taketurns._exchange.trace import EpisodeInfo, Trace
from taketurns._output.recorded import Recorded, open_recorded, recorded_episodes
from taketurns._replay.difference import Difference, record_differences
from taketurns._replay.model import EpisodeReplay, ReplayDivergence

__all__ = [
    "ReplayPlan",
    "ReplayResult",
    "Replaying",
    "prepare_replay",
    "replay_episode",
    "replay_episodes",
]

REPRODUCED, DIVERGED, FAILED = "reproduced", "diverged", "failed"


@attrs.define
class ReplayResult:
    """One episode's replay. ``status``: ``reproduced``, ``diverged`` or ``failed``
    (module docstring). ``divergence``: where it left the record (the first place;
    None unless diverged); ``differences``: the fields of the replayed record that
    differ from the recorded one; ``failure``: why the replayed episode failed (None
    unless failed). ``episode`` is the replayed episode, ``original`` the recorded one."""

    status: str
    episode: Episode
    original: Episode
    divergence: ReplayDivergence | None = None
    differences: list[Difference] = attrs.field(factory=list)
    failure: str | None = None

    @property
    def episode_id(self) -> str:
        return self.original.id

    def describe(self) -> str:
        """One line: the status and, when not reproduced, why."""
        if self.status == FAILED:
            return f"episode {self.episode_id}: failed: {self.failure}"
        if self.divergence is not None:
            return f"diverged: {self.divergence.describe()}"
        return f"episode {self.episode_id}: reproduced"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
            "differences": [attrs.asdict(d) for d in self.differences],
            "failure": self.failure,
        }


class ReplayPlan(Plan):
    """The run's plan (roles, harnesses, limits, sampling as recorded), each
    episode's agents answered by its ``EpisodeReplay`` instead of their clients."""

    def __init__(
        self, config: EvalConfig, env: Env, replays: Mapping[tuple[int, int], EpisodeReplay]
    ):
        super().__init__(config, env)
        self.config = config
        self.replays = replays
        refused = [
            f"env.{role}.harness = {agent.harness_id!r}: its seat cannot be replayed: "
            f"{agent.harness.replay_refusal}; replay a run whose seats use in-process or "
            "program harnesses"
            for role, agent in self.agents.items()
            if agent.harness.replay_refusal
        ]
        if refused:
            raise ConfigError(refused)

    def make_agent(
        self, role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        agent = super().make_agent(role, config, info, on_close)
        agent.client = self.replays[(info.task_idx, info.rollout)].model(role)
        return agent


@attrs.define
class Replaying:
    """What ``prepare_replay`` checked and built: the run read back, the recorded
    episodes to replay (in record order), their replays by (task idx, rollout), the
    plan, and how many damaged lines the records held."""

    recorded: Recorded
    originals: list[Episode]
    replays: dict[tuple[int, int], EpisodeReplay]
    plan: ReplayPlan
    damaged: int = 0


def prepare_replay(
    run_dir: str | Path,
    episode_ids: Sequence[str] = (),
    overrides: Sequence[tuple[str, str]] = (),
) -> Replaying:
    """Read ``run_dir`` back and get its episodes (those named by ``episode_ids``; all
    when empty) ready to replay, with ``overrides`` (``("env.<field>", "V")``) applied
    to the env's config. ``ConfigError`` for a directory that is no eval's, an episode
    id it does not hold, no episodes at all, or a seat that cannot be replayed."""
    recorded = open_recorded(run_dir, overrides, command="replay")
    damaged: list[int] = []
    by_id: dict[str, Episode] = {}
    for episode in recorded_episodes(recorded.episodes_path, damaged):
        by_id[episode.id] = episode  # a later record (a --resume rerun) replaces it
    if not by_id:
        raise ConfigError(f"replay: {recorded.episodes_path} holds no episodes to replay")
    unknown = [i for i in episode_ids if i not in by_id]
    if unknown:
        known = ", ".join(list(by_id)[:5]) + (" ..." if len(by_id) > 5 else "")
        raise ConfigError(
            [
                f"--episode {i}: {recorded.path} holds no episode with this id; its ids look "
                f"like: {known}"
                for i in unknown
            ]
        )
    originals = (
        [by_id[i] for i in dict.fromkeys(episode_ids)] if episode_ids else list(by_id.values())
    )
    replays = {(e.task.idx, e.rollout): EpisodeReplay(e) for e in originals}
    config = attrs.evolve(recorded.config, episode_retries=0, backend="local", output_dir=None)
    plan = ReplayPlan(config, recorded.env, replays)
    return Replaying(recorded, originals, replays, plan, len(damaged))


async def replay_episodes(replaying: Replaying, on_result: Callable[[ReplayResult], None]) -> None:
    """Replay ``replaying``'s episodes; ``on_result`` hears each one's result as it
    ends (in the order they end). Closes the plan. Checkpoint."""
    plan = replaying.plan
    pairs = [(e.task, e.rollout) for e in replaying.originals]

    def done(episode: Episode) -> None:
        replay = replaying.replays[(episode.task.idx, episode.rollout)]
        on_result(_settle(replay, episode))

    try:
        await play_pairs(plan.config, plan.env, plan, pairs, done)
    finally:
        await plan.aclose()


def _settle(replay: EpisodeReplay, episode: Episode) -> ReplayResult:
    """The replayed ``episode``'s result, its record made to say it is a replay."""
    original = replay.original
    episode.attempts = original.attempts  # the attempt recorded is the one replayed
    if "retried" in original.info:
        episode.info["retried"] = original.info["retried"]
    stopped_by = replay.divergence
    failure = None
    if stopped_by is None and not episode.ok and episode.cause != original.cause:
        failure = _failure(episode)
    replay.finish()
    differences = record_differences(original, episode)
    if stopped_by is not None:
        # the seat's run ended as an endpoint failure would; the cause is the divergence
        if episode.cause == "model":
            episode.cause = DIVERGENCE
        result = ReplayResult(DIVERGED, episode, original, stopped_by, differences)
    elif failure is not None:
        result = ReplayResult(FAILED, episode, original, None, differences, failure)
    elif replay.divergence is not None:
        result = ReplayResult(DIVERGED, episode, original, replay.divergence, differences)
    elif differences:
        first = differences[0]
        divergence = ReplayDivergence(
            original.id,
            first.seat or "-",
            first.turn,
            f"the replayed record differs: {first.describe()}",
        )
        result = ReplayResult(DIVERGED, episode, original, divergence, differences)
    else:
        result = ReplayResult(REPRODUCED, episode, original)
    return result


def _failure(episode: Episode) -> str:
    errors = [e.message for e in episode.errors]
    errors += [f"{t.agent.name}: {e.message}" for t in episode.traces for e in t.errors]
    cause = describe_cause(episode.cause or "")
    return f"{cause}" + (f" ({errors[0]})" if errors else "")


def replay_episode(
    run_dir: str | Path,
    episode_id: str,
    *,
    overrides: Mapping[str, str] | None = None,
) -> ReplayResult:
    """Replay one recorded episode of ``run_dir`` (an eval's ``-o`` directory) in this
    process and return its ``ReplayResult``: ``.episode`` the replayed episode (its
    traces, turn by turn), ``.status`` ``reproduced`` / ``diverged`` / ``failed``,
    ``.divergence`` where it left the record (episode id, seat, turn, what differed),
    ``.differences`` the record fields that differ.

    The env is built from the run's ``config.toml`` (``overrides``, e.g.
    ``{"env.invalid_retries": "2"}``, change it, as ``--env.<field>=V`` does) and plays
    the recorded task; every seat's model call is answered with the reply recorded for
    it, in order; a call the record does not hold raises ``ReplayDiverged`` inside the
    episode (the seat's run ends with ``model_error``) and is the divergence. Nothing
    is written. Runs its own ``trio.run``: call it from synchronous code (a script, a
    debugger, a test), not from inside a trio run. Raises ``ConfigError`` for a
    directory that is no eval's, an id it does not hold, or a seat that cannot be
    replayed (an agent CLI's)."""
    pairs = [(k if k.startswith("env.") else f"env.{k}", v) for k, v in (overrides or {}).items()]
    replaying = prepare_replay(run_dir, [episode_id], pairs)
    results: list[ReplayResult] = []
    trio.run(replay_episodes, replaying, results.append)
    return results[0]
