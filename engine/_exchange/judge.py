"""LLM judges as rewards: a model reads the task and the trace and gives a verdict.

A ``Judge`` is a named role with its own ``AgentConfig`` (model, endpoint, sampling,
``max_concurrent_calls``) and a prompt template. Its reward (``judge.rubric()``) is an
async reward function: it renders the template over the task's real row (also when
the agent's prompt was masked) and the trace, asks the judge model once, and parses
the verdict.

The template's placeholders (each replaced in one pass; other braces are left as
they are): ``{prompt}`` the task's prompt text, ``{system_prompt}``, ``{answer}`` the
task's reference answer, ``{response}`` the agent's last assistant text,
``{conversation}`` the whole conversation as ``role: text`` lines, ``{info}`` the
task's info as JSON.

**Verdict format.** The judge's reply must contain a line ``VERDICT: CORRECT``
(score 1.0), ``VERDICT: INCORRECT`` (0.0), or ``SCORE: x`` with x a number from 0 to 1
(case-insensitive; the last such line counts). A reply without one, or a call that
fails or times out (``timeout_s``), writes no reward (its key is absent)
and records the error on the trace.

Every judgement is recorded on the judged trace as a ``JudgeCall``
(``trace.judge_calls``), apart from the agent's turns: its usage is not the agent's
and it is not trainable. Judgements are cached per (task, rendered prompt) for the
life of the ``Judge`` (one eval process): a rollout judged like an earlier one reuses
that verdict (``cached=True``). Scoring runs inside the session's close, shielded and
bounded by the agent's ``timeouts.scoring_s``.

The judge's model client is made on first use, in the trio run that uses it, and
closed by ``aclose()`` (the eval closes every judge of ``judges()`` when it ends). An
endpoint judge's requests are timed, retried and backed off as the run's agents' are:
the eval hands it its request options (``take_request_options``) before it is used.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import attrs
import trio

from taketurns._config.options import AgentConfig, EvalConfig, Sampling, at_least
from taketurns._errors import ConfigError, ModelEndpointError, OptionError, ScoringError
from taketurns._exchange.rubric import Rubric, reward
from taketurns._exchange.seeds import DEFAULT_SEED, judge_seed
from taketurns._exchange.task import Task
from taketurns._exchange.trace import JudgeCall, Trace
from taketurns._models.builtin import BuiltinModel, is_builtin
from taketurns._models.messages import Message, SystemMessage, UserMessage, text_of
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse

__all__ = ["DEFAULT_JUDGE_PROMPT", "Judge", "JudgeConfig", "parse_verdict"]

DEFAULT_JUDGE_PROMPT = """\
You are grading an AI assistant's answer to a task against the reference answer.

<task>
{prompt}
</task>

<reference>
{answer}
</reference>

<response>
{response}
</response>

Is the response correct, given the reference answer? Think briefly, then end with \
exactly one line: VERDICT: CORRECT or VERDICT: INCORRECT"""

FIELDS = ("prompt", "system_prompt", "answer", "response", "conversation", "info")
_PLACEHOLDER = re.compile(r"\{(" + "|".join(FIELDS) + r")\}")
_VERDICT = re.compile(
    r"^\W*(?:VERDICT\s*:\s*\W*(CORRECT|INCORRECT)\b|SCORE\s*:\s*([-+]?\d+(?:\.\d+)?))",
    re.IGNORECASE | re.MULTILINE,
)


def parse_verdict(text: str) -> float | None:
    """The score in a judge's reply (see the module docstring), or None."""
    found = _VERDICT.findall(text)
    if not found:
        return None
    verdict, number = found[-1]
    if verdict:
        return 1.0 if verdict.upper() == "CORRECT" else 0.0
    score = float(number)
    return score if 0.0 <= score <= 1.0 else None


def _template(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not re.search(r"\{(response|conversation)\}", value):
        raise OptionError(
            attribute.name,
            value,
            "a template containing {response} or {conversation} (what is judged); "
            f"placeholders: {', '.join('{' + f + '}' for f in FIELDS)}",
        )


@attrs.define
class JudgeConfig:
    """A judge as configured (``--env.taskset.judge.*``, ``--env.judge.*``): no judge
    while ``model`` is None. ``model``, ``base_url`` (an endpoint model needs one),
    ``api_key_var``, ``sampling``, ``max_concurrent_calls``: the judge's own role;
    ``prompt``: the template; ``name``: the reward's name; ``weight``: its weight;
    ``timeout_s``: a bound on each judge call (the close's scoring_s bounds it too)."""

    model: str | None = None
    base_url: str | None = None
    api_key_var: str = "OPENAI_API_KEY"
    sampling: Sampling = attrs.field(factory=Sampling)
    max_concurrent_calls: int | None = attrs.field(default=None, validator=at_least(1))
    prompt: str = attrs.field(default=DEFAULT_JUDGE_PROMPT, validator=_template)
    system_prompt: str | None = None
    name: str = "judge"
    weight: float = 1.0
    timeout_s: float | None = attrs.field(default=None, validator=at_least(0, exclusive=True))

    def agent_config(self) -> AgentConfig:
        return AgentConfig(
            model=self.model,
            base_url=self.base_url,
            api_key_var=self.api_key_var,
            sampling=self.sampling,
            max_concurrent_calls=self.max_concurrent_calls,
        )


def render(template: str, task: Task, trace: Trace) -> str:
    """``template`` with its placeholders filled from ``task`` and ``trace``."""
    answer = task.answer
    if answer is not None and not isinstance(answer, str):
        answer = json.dumps(answer)
    values = {
        "prompt": task.prompt_text(),
        "system_prompt": task.system_prompt or "",
        "answer": ""
        if answer is None
        else answer
        if isinstance(answer, str)
        else json.dumps(answer),
        "response": trace.last_text,
        "conversation": "\n".join(f"{m.role}: {text_of(m.content)}" for m in trace.messages),
        "info": json.dumps(task.info, sort_keys=True, default=str),
    }
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


@attrs.define(eq=False)
class _Pending:
    done: trio.Event = attrs.field(factory=trio.Event)
    call: JudgeCall | None = None


class Judge:
    """``Judge(name, AgentConfig(model=...), prompt=TEMPLATE)``; ``Judge.of(config)``
    from a ``JudgeConfig``. ``client`` overrides the model client (a test double, a
    shared client). ``rubric()`` is its one reward; ``score`` may also be awaited
    directly. Raises ``ConfigError`` for a model it cannot reach."""

    def __init__(
        self,
        name: str = "judge",
        config: AgentConfig | None = None,
        *,
        prompt: str = DEFAULT_JUDGE_PROMPT,
        system_prompt: str | None = None,
        weight: float = 1.0,
        timeout_s: float | None = None,
        client: ModelClient | None = None,
    ) -> None:
        self.name = name
        self.config = config if config is not None else AgentConfig(model="builtin/judge")
        self.model = self.config.model or "builtin/judge"
        _template(self, attrs.fields(JudgeConfig).prompt, prompt)
        if client is None and not is_builtin(self.model) and self.config.base_url is None:
            raise ConfigError(
                f"judge {name!r}: model {self.model!r} is served by an endpoint; give its "
                "base_url (--env.taskset.judge.base_url) or use builtin/judge"
            )
        if client is None and is_builtin(self.model) and self.config.base_url is None:
            client = BuiltinModel.from_model_name(self.model, field=f"{name}.model")
        self.prompt = prompt
        self.system_prompt = system_prompt
        self.weight = weight
        self.timeout_s = timeout_s
        self._client = client
        self._owns_client = client is None
        self._limiter: trio.CapacityLimiter | None = None
        self._cache: dict[tuple[Any, ...], _Pending] = {}
        # OpenAIClient's timeout, retries and backoff: its defaults until the eval
        # hands over its own
        self._requests: dict[str, Any] = {}
        self._run_seed = DEFAULT_SEED

    def take_request_options(self, config: EvalConfig) -> None:
        """Time, retry and back off this judge's endpoint requests as the run's agents'
        are (``--request-timeout``, ``--request-retries``, ``--request-backoff``). The
        eval calls it for each of ``env.judges()`` before their first call; a client
        the judge already made keeps its options."""
        self._requests = {
            "timeout": config.request_timeout_s,
            "retries": config.request_retries,
            "backoff": config.request_backoff_s,
        }
        self._run_seed = config.seed

    def _endpoint_client(self) -> ModelClient:
        from taketurns._models.openai import OpenAIClient

        assert self.config.base_url is not None
        return OpenAIClient(
            self.config.base_url, api_key_var=self.config.api_key_var, **self._requests
        )

    @classmethod
    def of(cls, config: JudgeConfig) -> Judge | None:
        """The judge ``config`` describes, or None when it names no model."""
        if config.model is None:
            return None
        return cls(
            config.name,
            config.agent_config(),
            prompt=config.prompt,
            system_prompt=config.system_prompt,
            weight=config.weight,
            timeout_s=config.timeout_s,
        )

    def rubric(self) -> Rubric:
        """A rubric of one async reward named after the judge."""

        async def judged(task: Task, trace: Trace) -> float:
            return await self.score(task, trace)

        judged.__name__ = judged.__qualname__ = self.name
        return Rubric.from_functions([reward(weight=self.weight)(judged)])

    def _client_now(self) -> ModelClient:
        if self._client is None:
            self._client = self._endpoint_client()
        if self._limiter is None and self.config.max_concurrent_calls:
            self._limiter = trio.CapacityLimiter(self.config.max_concurrent_calls)
        return self._client

    async def score(self, task: Task, trace: Trace) -> float:
        """Judge ``trace`` against ``task`` (the real row); record the ``JudgeCall``
        on the trace. Raises ``ScoringError`` (the rubric records it and writes no reward)
        when the call fails, times out or its reply holds no verdict."""
        messages = self._messages(render(self.prompt, task, trace))
        key = (task.idx, task.name, messages[-1].content)
        pending = self._cache.get(key)
        if pending is not None:
            await pending.done.wait()  # a checkpoint, also when it is set
            if pending.call is not None and pending.call.score is not None:
                return self._record(trace, attrs.evolve(pending.call, request=(), cached=True))
        pending = self._cache[key] = _Pending()
        try:
            pending.call = await self._ask(messages)
        except trio.Cancelled:
            # the close's scoring_s ran out, or the eval was cancelled: still on record
            cut = "the judge call was cancelled (timeouts.scoring_s, or the eval stopping)"
            trace.judge_calls.append(JudgeCall(self.name, self.model, messages, error=cut))
            raise
        finally:
            pending.done.set()
            if (pending.call is None or pending.call.score is None) and self._cache.get(
                key
            ) is pending:
                del self._cache[key]  # a failed judgement is not reused
        return self._record(trace, pending.call)

    def _messages(self, text: str) -> tuple[Message, ...]:
        user = UserMessage(text)
        return (SystemMessage(self.system_prompt), user) if self.system_prompt else (user,)

    def _record(self, trace: Trace, call: JudgeCall) -> float:
        trace.judge_calls.append(call)
        if call.score is None:
            raise ScoringError(f"judge {self.name!r}: {call.error}")
        return call.score

    async def _ask(self, messages: tuple[Message, ...]) -> JudgeCall:
        """One judge call; every failure becomes the call's ``error``."""
        client = self._client_now()
        sampling = self.config.sampling.request_fields()
        if "seed" not in sampling:  # the run's seed, this judge and what it is asked
            asked = "\x1e".join(text_of(m.content) for m in messages)
            sampling["seed"] = judge_seed(self._run_seed, self.name, asked)
        request = ModelRequest(self.model, messages, sampling=sampling)
        start = time.monotonic()
        call = JudgeCall(self.name, self.model, messages)
        try:
            response = await self._complete(client, request)
        except trio.TooSlowError:
            why = f"no answer within {self.timeout_s:g}s (timeout_s)"
            return attrs.evolve(call, latency_s=time.monotonic() - start, error=why)
        except ModelEndpointError as exc:
            why = f"the judge's endpoint failed: {exc}"
            return attrs.evolve(call, latency_s=time.monotonic() - start, error=why)
        text = text_of(response.message.content)
        score = parse_verdict(text)
        error = None
        if score is None:
            shown = text if len(text) <= 200 else f"{text[:200]}..."
            error = (
                f"the judge's reply holds no verdict ({shown!r}); expected a line "
                "'VERDICT: CORRECT', 'VERDICT: INCORRECT' or 'SCORE: x' (x from 0 to 1)"
            )
        latency = time.monotonic() - start
        return attrs.evolve(
            call, response=text, score=score, usage=response.usage, latency_s=latency, error=error
        )

    async def _complete(self, client: ModelClient, request: ModelRequest) -> ModelResponse:
        deadline = trio.current_time() + self.timeout_s if self.timeout_s else float("inf")
        with trio.fail_at(deadline):
            if self._limiter is None:
                return await client.complete(request)
            async with self._limiter:
                return await client.complete(request)

    async def preflight(self) -> None:
        """One tiny call to the judge's endpoint with a throwaway client (the eval
        preflights every judge before its first episode), so a wrong URL, key or
        model is one ``ConfigError`` naming the judge. Nothing to check for an
        in-process model. A checkpoint."""
        if self.config.base_url is None or not self._owns_client:
            await trio.lowlevel.checkpoint()
            return
        client = self._endpoint_client()
        try:
            await client.preflight(self.model)
        except ConfigError as exc:
            raise ConfigError(f"judge {self.name!r}: {exc}") from None
        finally:
            await client.aclose()

    async def aclose(self) -> None:
        """Close the model client this judge made (shielded); idempotent."""
        with trio.CancelScope(shield=True):
            if self._owns_client and self._client is not None:
                client, self._client = self._client, None
                await client.aclose()
            else:
                await trio.lowlevel.checkpoint()
