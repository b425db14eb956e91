"""The model boundary: the one place a model call is made and recorded.

One request = one recorded ``Turn``. Before every call (and, through ``refusal``,
before a segment launches) the rollout's limits and ``@stop`` hooks are checked; a
refused call raises ``RolloutStopped`` after stamping the trace's stop condition.
In-process harnesses call ``complete`` directly; the interception server calls it
for out-of-process programs, so both paths share limits, hooks and recording.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import trio

from taketurns._config.options import Limits
from taketurns._errors import ModelEndpointError, RolloutStopped
from taketurns._exchange.rubric import Rubric
from taketurns._exchange.trace import ErrorInfo, Trace, Turn, Usage
from taketurns._models.messages import Message
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse

__all__ = ["ModelBoundary"]


class ModelBoundary:
    """Per-rollout. ``complete`` is a checkpoint; it raises ``RolloutStopped`` when a
    limit or hook refuses the call and ``ModelEndpointError`` when the endpoint fails
    (that failure is recorded as a turn with an error first)."""

    __slots__ = (
        "_unlimited",
        "client",
        "limiter",
        "limits",
        "model",
        "rubric",
        "sampling",
        "segment_start",
        "trace",
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
    ) -> None:
        self.trace = trace
        self.client = client
        self.model = model
        self.sampling = sampling
        self.limits = limits
        self.rubric = rubric
        self.limiter = limiter
        self.segment_start = 0  # the trace's turn count when the current segment began
        self._unlimited = (  # nothing to check before a call
            not rubric.stops
            and limits.max_turns is None
            and limits.max_segment_turns is None
            and limits.max_input_tokens is None
            and limits.max_output_tokens is None
            and limits.max_total_tokens is None
        )

    def _limit_hit(self) -> str | None:
        if self._unlimited:
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
        if not self._unlimited:
            condition = await self.refusal()
            if condition is not None:
                raise RolloutStopped(condition)
        request = ModelRequest(self.model, tuple(messages), tuple(tools), self._sampling(sampling))
        start = trio.current_time()
        try:
            if self.limiter is None:
                response = await self.client.complete(request)
            else:
                async with self.limiter:
                    response = await self.client.complete(request)
        except ModelEndpointError as exc:
            self._record(request, None, trio.current_time() - start, error=exc)
            raise
        self._record(request, response, trio.current_time() - start)
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
            )
        )
