"""The model boundary: the one place a model call is made and recorded.

One request = one recorded ``Turn``. Before every call (and, through ``refusal``,
before a segment launches) the rollout's limits and ``@stop`` hooks are checked; a
refused call raises ``RolloutStopped`` after stamping the trace's stop condition.
In-process harnesses call ``complete`` directly; the interception server calls it
for out-of-process programs, so both paths share limits, hooks and recording.

Time on the endpoint is infrastructure. The boundary knows which request the
endpoint is being waited on for (``in_flight``; a request queued for the model-call
limiter counts) and which one was at a given moment (``waited_at``): a timeout that
fires while a request is in flight is not the model's doing, and ``timed_out`` turns
it into a ``model`` failure (stop condition ``model_error``, an error of kind
``model`` naming the timeout) instead of the timeout's own stop condition.

Seeds: a boundary given its session's ``seed`` sends the i-th call it makes with
``seed = call_seed(seed, i)`` (``_exchange.seeds``) unless the request already has
one (the role pinned it in its sampling, or an out-of-process program chose its
own); the turn records the seed sent (None when the client had to leave it out).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import trio

from taketurns._config.options import Limits
from taketurns._errors import ModelEndpointError, RolloutStopped
from taketurns._exchange.rubric import Rubric
from taketurns._exchange.seeds import CallSeeds
from taketurns._exchange.trace import ErrorInfo, Trace, Turn, Usage
from taketurns._models.messages import Message
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse

__all__ = ["ModelBoundary"]


class _Wait:
    """One request the endpoint was (or is) waited on for: when it was sent and
    ended (trio clock), its turn index, and whether the endpoint answered it (a
    failure is an answer; a cancelled request is not)."""

    __slots__ = ("answered", "ended", "index", "request", "sent")

    def __init__(self, request: ModelRequest, sent: float, index: int) -> None:
        self.request = request
        self.sent = sent
        self.index = index
        self.ended = math.inf
        self.answered = False

    def covers(self, when: float) -> bool:
        """In flight at ``when``: sent by then, and answered after it (or cut by a
        cancellation at or after it: the cancellation of a timeout that fired at
        ``when`` is delivered at ``when`` or later)."""
        if self.sent > when:
            return False
        return self.ended > when or (not self.answered and self.ended >= when)


class ModelBoundary:
    """Per-rollout. ``complete`` is a checkpoint; it raises ``RolloutStopped`` when a
    limit or hook refuses the call and ``ModelEndpointError`` when the endpoint fails
    (that failure is recorded as a turn with an error first). ``unlimited``: no limit
    and no stop hook can refuse a call, so ``refusal()`` would return None (a caller
    on the hot path may skip it)."""

    __slots__ = (
        "_ended",
        "_open",
        "client",
        "limiter",
        "limits",
        "model",
        "rubric",
        "sampling",
        "seeds",
        "segment_start",
        "trace",
        "unlimited",
    )

    def __init__(
        self,
        trace: Trace,
        client: ModelClient,
        *,
        model: str,
        sampling: Mapping[str, Any],
        limits: Limits,
        rubric: Rubric,
        limiter: trio.CapacityLimiter | None = None,
        seed: int | None = None,
    ) -> None:
        self.trace = trace
        self.client = client
        self.model = model
        self.sampling = sampling
        self.limits = limits
        self.rubric = rubric
        self.limiter = limiter
        # the session's seed: call i is sent call_seed(seed, i)
        self.seeds = CallSeeds(seed) if seed is not None else None
        self.segment_start = 0  # the trace's turn count when the current segment began
        self.unlimited = (  # nothing to check before a call: refusal() would be None
            not rubric.stops
            and limits.max_turns is None
            and limits.max_segment_turns is None
            and limits.max_input_tokens is None
            and limits.max_output_tokens is None
            and limits.max_total_tokens is None
        )
        self._open: list[_Wait] = []  # requests waiting on the endpoint now, oldest first
        self._ended: _Wait | None = None  # the request that ended last

    @property
    def in_flight(self) -> ModelRequest | None:
        """The oldest request the endpoint is being waited on for now, or None."""
        return self._open[0].request if self._open else None

    def _wait_at(self, when: float) -> _Wait | None:
        for wait in self._open:
            if wait.covers(when):
                return wait
        last = self._ended
        return last if last is not None and last.covers(when) else None

    def waited_at(self, when: float) -> ModelRequest | None:
        """The request the endpoint was being waited on for at ``when`` (trio clock):
        one still in flight that was sent by then, or the last one to end if it was
        in flight then; else None."""
        wait = self._wait_at(when)
        return None if wait is None else wait.request

    def timed_out(self, which: str | None, when: float) -> str | None:
        """The stop condition of the timeout ``which`` (``segment_timeout``,
        ``rollout_timeout``, ``episode_timeout``) that fired at ``when``: ``which``
        itself when no model request was in flight then (the agent's own program, its
        tools or the env were running: an outcome); else ``model_error``, with an
        error of kind ``model`` on the trace saying which timeout fired and which
        request it found waiting (time on the endpoint is never held against the
        model). Stamps the trace's stop condition if it has none."""
        wait = self._wait_at(when)
        if wait is None:
            return which
        trace = self.trace
        trace.errors.append(
            ErrorInfo(
                "model",
                f"the {which} fired while the model endpoint was being waited on (the "
                f"request for turn {wait.index}, sent {when - wait.sent:.3g}s before, had no "
                "answer yet); time on the endpoint is never held against the model, so the "
                "run failed instead of ending by the timeout: give the endpoint more time, "
                "or set --request-timeout below the timeout so a stalled request is retried",
                "TooSlowError",
            )
        )
        if trace.stop_condition is None:
            trace.stop_condition = "model_error"
        return "model_error"

    def _limit_hit(self) -> str | None:
        if self.unlimited:
            return None
        limits, used, turns = self.limits, self.trace.usage, len(self.trace.turns)
        if limits.max_turns is not None and turns >= limits.max_turns:
            return "max_turns"
        cap = limits.max_segment_turns
        if cap is not None and turns - self.segment_start >= cap:
            return "max_segment_turns"
        if limits.max_input_tokens is not None and used.prompt_tokens >= limits.max_input_tokens:
            return "max_input_tokens"
        if (
            limits.max_output_tokens is not None
            and used.completion_tokens >= limits.max_output_tokens
        ):
            return "max_output_tokens"
        if limits.max_total_tokens is not None and used.total_tokens >= limits.max_total_tokens:
            return "max_total_tokens"
        return None

    async def refusal(self) -> str | None:
        """The stop condition that would refuse the next call, or None. Stamps the
        trace when refusing. A checkpoint only when stop hooks exist."""
        condition = self._limit_hit()
        if condition is None and self.rubric.stops:
            condition = await self.rubric.check_stops(self.trace)
        if condition is not None and self.trace.stop_condition is None:
            self.trace.stop_condition = condition
        return condition

    def _sampling(self, overrides: Mapping[str, Any] | None) -> Mapping[str, Any]:
        sampling = {**self.sampling, **overrides} if overrides else self.sampling
        budget = self.limits.max_output_tokens
        if budget is not None:
            left = budget - self.trace.usage.completion_tokens
            asked = sampling.get("max_tokens")
            if asked is None or asked > left:
                sampling = {**sampling, "max_tokens": left}
        return sampling

    async def complete(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[Mapping[str, Any]] = (),
        sampling: Mapping[str, Any] | None = None,
    ) -> ModelResponse:
        if not self.unlimited:
            condition = await self.refusal()
            if condition is not None:
                raise RolloutStopped(condition)
        fields = self._sampling(sampling)
        seeds = self.seeds
        if seeds is not None:
            seed = seeds.next()  # counted also when not sent: call i stays call i
            if "seed" not in fields:
                fields = {**fields, "seed": seed}
        request = ModelRequest(self.model, tuple(messages), tuple(tools), fields)
        start = trio.current_time()
        wait = _Wait(request, start, len(self.trace.turns))
        self._open.append(wait)
        try:
            if self.limiter is None:
                response = await self.client.complete(request)
            else:
                async with self.limiter:
                    response = await self.client.complete(request)
            wait.answered = True
        except ModelEndpointError as exc:
            wait.answered = True
            self._record(request, None, trio.current_time() - start, error=exc)
            raise
        finally:
            wait.ended = trio.current_time()
            self._open.remove(wait)
            self._ended = wait
        self._record(request, response, wait.ended - start)
        return response

    def _record(
        self,
        request: ModelRequest,
        response: ModelResponse | None,
        latency: float,
        *,
        error: ModelEndpointError | None = None,
    ) -> None:
        trace = self.trace
        tools = request.tools
        tool_names = tuple(t.get("function", {}).get("name", "") for t in tools) if tools else ()
        if response is None:
            assert error is not None
            trace.errors.append(ErrorInfo.of("model", error))
            trace.turns.append(
                Turn(
                    len(trace.turns),
                    request.messages,
                    None,
                    latency_s=latency,
                    error=str(error),
                    tools=tool_names,
                    seed=request.sampling.get("seed"),
                    sampling=_sent(request.sampling, frozenset()),
                )
            )
            return
        usage = response.usage
        trace.usage = Usage(
            trace.usage.prompt_tokens + usage.prompt_tokens,
            trace.usage.completion_tokens + usage.completion_tokens,
        )
        trace.turns.append(
            Turn(
                len(trace.turns),
                request.messages,
                response.message,
                usage,
                response.finish_reason,
                latency,
                tools=tool_names,
                token_ids=response.token_ids,
                prompt_token_ids=response.prompt_token_ids,
                logprobs=response.logprobs,
                policy_version=response.policy_version,
                seed=None if "seed" in response.dropped else request.sampling.get("seed"),
                sampling=_sent(request.sampling, response.dropped),
                stop_token=response.stop_token,
                retokenized=response.retokenized,
                token_gap=response.token_gap,
            )
        )


def _sent(sampling: Mapping[str, Any], dropped: frozenset[str]) -> dict[str, Any]:
    """The sampling fields a request went out with, but its seed (``Turn.seed``)."""
    return {k: v for k, v in sampling.items() if k != "seed" and k not in dropped}
