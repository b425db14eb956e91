"""Streaming rollouts for a trainer's own trio loop: ``open_rollouts``.

::

    async with taketurns.open_rollouts(env, config) as source:
        async for group in source.groups(tasks, per_task=8):
            batch = group.samples()          # token-level, advantages filled in
            ...                              # a policy-gradient step
            source.policy_version += 1       # optional: tag the new weights

Two policies from one stream (``policies="role"`` or ``"model"``): each task's
episodes make one group per policy (``group.policy``), each with that policy's
advantages and samples only; the trainer tags each policy's weights on its own
(``source.policy_versions[policy]``), and staleness is measured per policy.

Structure (docs/design.md "Structured concurrency: who owns what")::

    open_rollouts (env.setup ... env.finalize, shielded; the plan's clients closed)
     └─ model servers the config names (llamacpp/ models, model_server), then the
        services nursery: interception server (if a harness needs one), asyncio host
        └─ episodes nursery: one feeder task per ``groups()`` stream, and the episodes
           it admits, each holding a slot of the episode limiter (``concurrency``)

Backpressure: a stream's feeder admits episodes task by task, each taking a slot of
the episode limiter (at most ``config.concurrency`` episodes in flight), and pauses
while ``max_waiting`` finished groups wait for the consumer; the episodes already in
flight still finish, so a stalled consumer holds at most ``max_waiting`` groups plus
those the in-flight episodes complete. Leaving the ``async with`` (normally, by an
exception, or cancelled) cancels every episode in flight: each is closed and scored
as ``cancelled`` (docs/design.md, "Structured concurrency": guaranteed close and
scoring) and kept: in
``source.cut_off`` while its group is incomplete, in ``source.undelivered`` with its
group when it was the group's last episode; nothing is lost. Episode retries are the eval's
(``_eval.play.play_with_retries``): an episode's attempts share its one slot, and
only the last attempt is written and joins its group.

From asyncio: run the trainer's trio side in a thread (``trio.run`` in
``loop.run_in_executor``), handing groups over a queue, or host asyncio inside trio
with ``trio_asyncio``; see docs/train/index.md.
"""

from __future__ import annotations

import contextlib
import enum
import shutil
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

from taketurns._config.options import AgentConfig, EvalConfig, Sampling
from taketurns._errors import SessionError, sole_error
from taketurns._eval.aio import open_asyncio_host
from taketurns._eval.env import Env
from taketurns._eval.episode import Episode, episode_id
from taketurns._eval.plan import Plan, preflight
from taketurns._eval.play import play_with_retries
from taketurns._eval.servers import open_model_servers
from taketurns._exchange.agent import Agent
from taketurns._exchange.seeds import derive
from taketurns._exchange.task import Task
from taketurns._exchange.trace import AgentStamp, EpisodeInfo, Trace
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse
from taketurns._output.records import episode_line
from taketurns._output.rundir import RunDir
from taketurns._train.groups import Group, check_policies, make_groups, policy_of

__all__ = ["GroupStream", "RolloutSource", "open_rollouts"]


class SourceState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"


class _Tagged(ModelClient):
    """The episode's client, stamping each response with the version tag of the
    agent's policy (``RolloutSource.version_of``; when the trainer set one) as the
    turn's ``policy_version``."""

    def __init__(self, inner: ModelClient, source: RolloutSource, policy: str | None) -> None:
        self.inner, self.source, self.policy = inner, source, policy

    async def complete(self, request: ModelRequest) -> ModelResponse:
        response = await self.inner.complete(request)
        tag = self.source.version_of(self.policy)
        return response if tag is None else attrs.evolve(response, policy_version=str(tag))


class RolloutSource:
    """What ``open_rollouts`` yields. Only the task that opened it may use it.

    ``policy_version``: an integer tag the trainer sets between steps (None: untagged);
    every turn records it (else the model name the server answered with), every group
    the oldest tag its episodes started under. ``policies`` (None, "role" or "model"):
    what a group is per task; ``policy_keys`` the policies each task yields a group
    for, in role order. ``policy_versions``: a policy's own tag, set by the trainer
    after updating that policy, overriding ``policy_version`` for it
    (``version_of``); each turn records its agent's policy's tag, each group its
    policy's oldest. With ``max_staleness`` N, a group whose tag is more than N
    behind its policy's tag when it would be handed over is dropped into ``stale``.
    When the source closes, ``cut_off`` receives the episodes of every group not yet
    complete (those in flight cancelled, closed and scored) and ``undelivered`` the
    complete groups nobody took, a group that a cancelled episode completed included
    (read both to see every episode)."""

    def __init__(
        self,
        env: Env,
        plan: Plan,
        nursery: trio.Nursery,
        config: EvalConfig,
        *,
        max_waiting: int,
        scale: bool,
        max_staleness: int | None,
        policies: str | None = None,
        run_dir: RunDir | None = None,
    ) -> None:
        self.env, self.plan, self._nursery = env, plan, nursery
        self.run_dir = run_dir
        self.config = config  # concurrency, the episode timeout, episode retries
        self.limiter = trio.CapacityLimiter(config.concurrency)
        self.max_waiting = max_waiting
        self.scale = scale
        self.max_staleness = max_staleness
        self.policy_version: int | None = None
        self.policies = policies
        self.policy_keys = policy_keys(plan, policies)
        self.policy_versions: dict[str, int] = {}
        self.stale: list[Group] = []
        self.cut_off: list[Episode] = []
        self.undelivered: list[Group] = []
        self.started = 0  # episodes admitted so far
        self.state = SourceState.OPEN
        self._serial = 0
        self._groups = 0
        self._streams: list[GroupStream] = []
        self._rank = {role: i for i, role in enumerate(plan.roles)}

    @property
    def in_flight(self) -> int:
        """Episodes admitted and not yet finished."""
        return int(self.limiter.borrowed_tokens)

    def groups(self, tasks: Sequence[Task], *, per_task: int) -> GroupStream:
        """Play ``per_task`` episodes of each task; iterate the returned stream for
        each task's complete ``Group`` as soon as its last episode ends (completion
        order, not task order). Not a checkpoint; raises ``SessionError`` once the
        source is closed and ``ValueError`` for ``per_task`` < 1."""
        if self.state is SourceState.CLOSED:
            raise SessionError("this rollout source is closed; open a new one")
        if per_task < 1:
            raise ValueError(f"per_task = {per_task!r}; expected an integer >= 1")
        stream = GroupStream(self, list(tasks), per_task, self._serial)
        self._serial += 1
        self._streams.append(stream)
        self._nursery.start_soon(self._feed, stream)
        return stream

    def _closed(self) -> None:
        """After the episodes nursery: what the streams still hold."""
        for stream in self._streams:
            for partial in stream.partial_groups():
                self.cut_off += partial
            self.undelivered += stream.ready
            stream.ready.clear()

    def version_of(self, policy: str | None) -> int | None:
        """``policy``'s tag: its own in ``policy_versions``, else ``policy_version``."""
        if policy is not None and policy in self.policy_versions:
            return self.policy_versions[policy]
        return self.policy_version

    def stale_now(self, group: Group) -> bool:
        current = self.version_of(group.policy)
        if self.max_staleness is None or current is None:
            return False
        if group.policy_version is None:
            return False
        return current - group.policy_version > self.max_staleness

    def _tags(self) -> dict[str, Any]:
        """The tags an episode starting now records in its ``info``."""
        if self.policies is None:
            return {"policy_version": self.policy_version}
        return {
            "policy_version": self.policy_version,
            "policy_versions": dict(self.policy_versions),
        }

    async def _feed(self, stream: GroupStream) -> None:
        for slot, task in enumerate(stream.tasks):
            number = self._groups  # the group's number in this source: unique ids
            self._groups += 1
            stream.numbers[slot] = number
            for rollout in range(stream.per_task):
                await stream.wait_room()
                token = (stream.serial, slot, rollout)
                await self.limiter.acquire_on_behalf_of(token)
                self.started += 1
                self._nursery.start_soon(self._play, stream, task, token, self._tags())

    def _make_agent(
        self, role: str, config: AgentConfig, info: EpisodeInfo, on_close: Callable[[Trace], None]
    ) -> Agent:
        agent = self.plan.make_agent(role, config, info, on_close)
        policy = policy_of(AgentStamp(role, agent.model, ""), self.policies)
        agent.client = _Tagged(agent.client, self, policy)  # this episode's copy only
        return agent

    async def _play(
        self, stream: GroupStream, task: Task, token: tuple[int, int, int], tags: dict[str, Any]
    ) -> None:
        """One admitted episode, retried as the eval retries (``play_with_retries``):
        it holds its limiter slot from admission until its last attempt ends, and
        only that attempt is written and reaches its group. ``tags``: the version
        tags at admission (a retry is tagged with those it starts under)."""
        _, slot, rollout = token
        name = f"{episode_id(self.env.id, task.idx, rollout)}/g{stream.numbers[slot]}"

        # each group's episodes draw afresh (a group is a new sample of the task)
        seed = derive("group", self.config.seed, task.idx, rollout, stream.numbers[slot])

        def attempt(n: int) -> Episode:
            episode = Episode(name, self.env.id, task, rollout, attempts=n, seed=seed)
            episode.info.update(tags if n == 1 else self._tags())
            episode.info["group"] = stream.numbers[slot]
            return episode

        def done(episode: Episode) -> None:
            episode.traces.sort(key=lambda t: self._rank.get(t.agent.name, len(self._rank)))
            self.limiter.release_on_behalf_of(token)
            if self.run_dir is not None:
                self.run_dir.append_lines([episode_line(episode)])
            stream.finished(slot, episode)

        await play_with_retries(self.config, self.env, self._make_agent, attempt, done)


class GroupStream:
    """An async iterator of ``Group``; ``__anext__`` is a checkpoint."""

    def __init__(self, source: RolloutSource, tasks: list[Task], per_task: int, serial: int):
        self.source, self.tasks, self.per_task, self.serial = source, tasks, per_task, serial
        self.ready: deque[Group] = deque()
        self.numbers: dict[int, int] = {}  # slot -> the group's number in the source
        self._partial: dict[int, list[Episode]] = {}
        self._owed = len(tasks) * len(source.policy_keys)
        self._event = trio.Event()

    def changed(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait_room(self) -> None:
        """Until fewer than ``max_waiting`` groups wait. A checkpoint."""
        await trio.lowlevel.checkpoint()
        while len(self.ready) >= self.source.max_waiting:
            await self._event.wait()

    def finished(self, slot: int, episode: Episode) -> None:
        """``episode`` ended; its task's groups (one per policy) are ready once the
        task's last episode has."""
        partial = self._partial.setdefault(slot, [])
        partial.append(episode)
        if len(partial) == self.per_task:
            del self._partial[slot]
            source = self.source
            self.ready += make_groups(
                episode.task,
                partial,
                policies=source.policies,
                keys=source.policy_keys,
                scale=source.scale,
            )
            self.changed()

    def partial_groups(self) -> list[list[Episode]]:
        return list(self._partial.values())

    def __aiter__(self) -> GroupStream:
        return self

    async def __anext__(self) -> Group:
        await trio.lowlevel.checkpoint()
        while True:
            while self.ready:
                group = self.ready.popleft()
                self._owed -= 1
                self.changed()
                if not self.source.stale_now(group):
                    return group
                self.source.stale.append(group)
            if self._owed == 0 or self.source.state is SourceState.CLOSED:
                raise StopAsyncIteration
            await self._event.wait()


def policy_keys(plan: Plan, policies: str | None) -> list[str | None]:
    """The policies a task yields groups for: ``[None]``, the trainable roles, or
    their distinct model names, in role order. ``ValueError`` when ``policies`` is
    set and no role is trainable."""
    if policies is None:
        return [None]
    trainable = [role for role, a in plan.roles.items() if a.trainable]
    if not trainable:
        raise ValueError(
            f"policies = {policies!r}, but no role of the env is trainable; set "
            "trainable = true on a role (e.g. --env.<role>.trainable=true)"
        )
    stamps = [AgentStamp(role, plan.agents[role].model, "") for role in trainable]
    return list(dict.fromkeys(policy_of(s, policies) for s in stamps))


#: A trainer's sampler unless its config sets a field: temperature 1 over the whole
#: distribution, so that the logprobs recorded are those of the policy that sampled
#: (an importance ratio against them is on-policy). vLLM's names for "no truncation";
#: a llamacpp/ role gets the same through its own names (``_models.local``).
RL_SAMPLING = Sampling(
    temperature=1.0,
    top_p=1.0,
    extra={"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0},
)


def _asking_for_tokens(config: EvalConfig) -> EvalConfig:
    """``config`` asking every call for token ids and logprobs (vLLM's
    ``return_token_ids`` and ``logprobs``; the built-in model's toy tokens), sampled
    with ``RL_SAMPLING`` where it sets no field of its own."""
    sampling = config.sampling
    extra = {"return_token_ids": True, **RL_SAMPLING.extra, **sampling.extra}
    asked = Sampling(logprobs=True if sampling.logprobs is None else sampling.logprobs)
    merged = sampling.over(asked).over(RL_SAMPLING)
    return attrs.evolve(config, sampling=attrs.evolve(merged, extra=extra))


def _rl_sampling(config: EvalConfig) -> EvalConfig:
    """``config`` sampled with temperature 1 and top_p 1 where it sets neither (calls
    asking for no token data: the extra fields may be refused)."""
    merged = config.sampling.over(Sampling(temperature=1.0, top_p=1.0))
    return attrs.evolve(config, sampling=merged)


@contextlib.asynccontextmanager
async def open_rollouts(
    env: Env,
    config: EvalConfig,
    *,
    max_waiting: int = 2,
    scale: bool = False,
    max_staleness: int | None = None,
    policies: str | None = None,
    tokens: bool = True,
    check_endpoints: bool = True,
    run_dir: RunDir | None = None,
    models: Mapping[str, ModelClient] | None = None,
) -> AsyncIterator[RolloutSource]:
    """A ``RolloutSource`` running ``env``'s episodes in this trio loop (module
    docstring). ``config`` gives concurrency, endpoints, sampling and timeouts (its
    ``env_id``, ``num_tasks`` and ``rollouts`` are not used: ``groups`` takes tasks),
    and episode retries as the CLI's (``episode_retries``, ``retry_causes``: a group
    holds each episode's last attempt only, with its ``attempts`` and
    ``info["retried"]``; the attempts share the episode's one admission slot).
    ``scale``: advantages divided by the group's reward std. ``policies``: None
    (one group per task), "role" (one per trainable role) or "model" (one per model
    name of a trainable role), each task's groups handed over together, in role
    order (``RolloutSource``); ``ValueError`` for another value or no trainable
    role. Calls are sampled at temperature 1 without truncation (``RL_SAMPLING``)
    where ``config.sampling`` sets no field of its own. ``tokens``: ask every
    call for token ids and logprobs (turn off for endpoints refusing vLLM's
    ``return_token_ids``). ``check_endpoints``: call each endpoint once first (the
    CLI's preflight), so a wrong URL, key or model raises ``ConfigError`` before any
    episode starts, as a bad config does. ``run_dir`` (prepared by the caller): every
    episode is appended to its ``episodes.jsonl`` as it finishes, cut-off ones too,
    as ``taketurns eval`` writes them (``taketurns export`` reads them back, one group
    per streamed group); a model server the source starts logs there (else in a new
    temporary directory, removed as the source closes unless it closes with an
    error, whose message may name the log). ``models``: in-process clients the
    caller owns, by model name (a live policy: ``taketurns.train.LocalPolicy``): a
    role whose model is one of these names calls that client, never preflighted nor
    closed by the source. An exception of the body leaves as itself (not in an
    exception group)."""
    if max_waiting < 1:
        raise ValueError(f"max_waiting = {max_waiting!r}; expected an integer >= 1")
    check_policies(policies)
    config = _asking_for_tokens(config) if tokens else _rl_sampling(config)
    plan = Plan(config, env, models=models)
    policy_keys(plan, policies)  # no trainable role: refused before anything starts
    try:
        if check_endpoints:
            await preflight(config, env, owned=plan.owned)
        if run_dir is not None:
            run_dir.open()
        await env.setup()
        with _unwrapped(), _server_logs(plan, run_dir) as log_dir:
            async with (
                open_model_servers(plan, log_dir, timeout_s=config.preflight_timeout_s),
                trio.open_nursery() as services,
                open_asyncio_host(),
            ):
                await _start_services(config, plan, services)
                sources: list[RolloutSource] = []
                try:
                    async with trio.open_nursery() as episodes:
                        source = RolloutSource(
                            env,
                            plan,
                            episodes,
                            config,
                            max_waiting=max_waiting,
                            scale=scale,
                            max_staleness=max_staleness,
                            policies=policies,
                            run_dir=run_dir,
                        )
                        sources.append(source)
                        try:
                            yield source
                        finally:
                            source.state = SourceState.CLOSED
                            episodes.cancel_scope.cancel()
                finally:
                    for source in sources:
                        source._closed()
                services.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await env.finalize()
        await plan.aclose()
        if run_dir is not None:
            run_dir.close()


@contextlib.contextmanager
def _server_logs(plan: Plan, run_dir: RunDir | None) -> Iterator[Path]:
    """Where ``plan``'s model servers log: ``run_dir``, else a new temporary
    directory, removed on a clean exit (kept after an error: its message may name
    the log)."""
    if run_dir is not None or not plan.servers:
        yield run_dir.path if run_dir is not None else Path()
        return
    temp = Path(tempfile.mkdtemp(prefix="taketurns-model-server-"))
    yield temp  # not reached again after an error: the directory stays
    shutil.rmtree(temp, ignore_errors=True)


async def _start_services(config: EvalConfig, plan: Plan, services: trio.Nursery) -> None:
    if plan.needs_interception:
        from taketurns._http.interception import InterceptionServer

        server = InterceptionServer(
            host=config.interception_host,
            port=config.interception_port,
            public_url=config.interception_public_url,
        )
        plan.services["interception"] = await services.start(server.run)


@contextlib.contextmanager
def _unwrapped() -> Any:
    """The body's own exception leaves the source's nurseries as itself."""
    try:
        yield
    except BaseExceptionGroup as group:
        sole = sole_error(group)
        if not isinstance(sole, BaseExceptionGroup) and not isinstance(sole, trio.Cancelled):
            raise sole from None
        raise
