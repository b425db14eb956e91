"""The base of the agent-framework harnesses: an agent written with a Python framework
(``openai-agents``, ``pydantic-ai``, ``langgraph``) plays a seat in process.

The user names a factory by reference, as envs are named
(``--env.<role>.harness_options.agent=./my_agent.py:make`` or ``package.module:make``).
The harness calls it once per rollout as ``make(model)`` or ``make(model, tools)``:
``model`` is the framework's own model object (``OpenAIChatCompletionsModel``,
``OpenAIChatModel``, ``ChatOpenAI``) whose client reaches the rollout's model
boundary (``taketurns.harnesses.framework_gate``: every call one recorded turn with the
run's seeds, limits, gate, request options and token data); ``tools`` are the
rollout's tools (an env's, e.g. retail-lite's store) as the framework's own function
tools. It returns the framework's agent (each subclass says which type).

The exchange is native (``resumes = True``): a segment is one run of the framework's
loop (its tool loop inside) on the user's message; the next ``turn()`` hands the
framework only the new message and continues its own state (the SDK's ``Session``,
pydantic-ai's ``message_history``, the graph's checkpointer thread); ``launch`` (a
first segment) starts a fresh agent and state; ``close()`` drops them. The trace's
conversation gets each model answer and the tool results the framework sent back;
a rollout tool's result that no request carried back (a run that ends on a tool) is
recorded when the segment ends (``Gate.run_tool``).

Everything runs in the eval process: the framework's loop is an asyncio task on the
run's trio-asyncio loop (``taketurns.env.run_asyncio``), and its tools are the
Python functions the user wrote, run there too (an ``async def`` tool runs on the
loop; a plain ``def`` one the framework may run in a worker thread). What the
framework hands the loop's default executor (``run_in_executor(None, ...)``) runs on
threads the seat owns, joined when it closes (``framework_workers``): no thread of a
rollout outlives it. A cancellation
(timeout, ``close()``, Ctrl-C) cancels the framework's asyncio task, which unwinds
before the segment ends; the segment's model calls in flight are cancelled with it.
An exception of the framework is the harness failing (its traceback on the trace),
unless a model call of the segment was refused by a limit or hook or the endpoint
failed: then that is how the run ends. Retries: the framework's client is built with
``max_retries=0`` and its runner's own retries are left off; the model client's retry
policy (``--max-retries``) is the only one.

Options: ``agent`` (the factory reference, required). The factory is called once when
the harness is built, with a model whose endpoint is closed, to check what it returns:
an unimportable factory, the wrong signature or the wrong return type is refused
before any episode.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import importlib
import inspect
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs

from taketurns import ConfigError, HarnessError, Message
from taketurns.harness import Harness, Prompt, Rollout, as_tools, load_reference, run_asyncio
from taketurns.harnesses.framework_gate import BASE_URL, Gate, GateTransport
from taketurns.harnesses.framework_workers import Workers, install, seat_jobs

__all__ = ["FrameworkHarness", "Seat", "tool_specs", "without_platform_thread"]

# what a framework's client sends as its API key: the transport never reads it
API_KEY = "taketurns-in-process"
# where the harness looks for the framework's types in a wrong return value
_FRAMEWORKS = {"agents": "openai-agents", "pydantic_ai": "pydantic-ai", "langgraph": "langgraph"}


@attrs.define(eq=False)
class Seat:
    """One rollout's framework: its endpoint gate, HTTP client, model object, the
    agent the factory built and the framework's own conversation state."""

    gate: Gate
    http: Any  # httpx2.AsyncClient over the gate
    model: Any
    agent: Any
    memory: Any = None
    system: str | None = None  # the task's system prompt, for frameworks that re-send it
    # where the framework's default-executor jobs run (framework_workers): joined at close
    workers: Workers = attrs.field(factory=Workers)


class FrameworkHarness(Harness):
    """Subclasses name their framework (``package``, ``extra``, ``returns``) and
    implement ``make_model``, ``refusal``, ``framework_tools`` and ``run``."""

    resumes = True
    package: ClassVar[str]  # the framework's import name
    distribution: ClassVar[str]  # its PyPI name
    extra: ClassVar[str]  # the taketurns extra that installs it
    returns: ClassVar[str]  # what a factory returns, for messages

    def __init__(self, agent: str | None = None) -> None:
        if not isinstance(agent, str) or not agent:
            raise HarnessError(
                f"harness {self.id!r} needs the option agent, the factory that builds the "
                f"framework's agent: --env.<role>.harness_options.agent=./my_agent.py:make "
                f"(or package.module:make) returning {self.returns}"
            )
        try:
            importlib.import_module(self.package)
        except ImportError:
            raise HarnessError(
                f"harness {self.id!r} needs {self.distribution}: pip install "
                f"'taketurns[{self.extra}]'"
            ) from None
        try:
            factory = load_reference(agent, field="harness_options.agent")
        except ConfigError as exc:
            raise HarnessError(str(exc)) from None
        self.agent = agent
        self.factory = factory
        self._arity = self._check_signature(factory)
        probe = Gate(None)  # never opened: the probe model's calls would answer 409
        self._checked(self._build(self.make_model(self._http(probe), "probe"), []))

    # -- what a subclass provides -----------------------------------------------------

    @abc.abstractmethod
    def make_model(self, http: Any, name: str) -> Any:
        """The framework's model object for model ``name`` over the client ``http``."""

    @abc.abstractmethod
    def refusal(self, built: Any) -> str | None:
        """Why ``built`` (the factory's return value) is not a usable agent, or None."""

    @abc.abstractmethod
    def framework_tools(self, rollout: Rollout, gate: Gate) -> list[Any]:
        """The rollout's tools as the framework's function tools (``tool_specs``)."""

    @abc.abstractmethod
    async def run(self, seat: Seat, messages: Sequence[Message], first: bool) -> None:
        """One run of the framework's loop on ``messages`` (asyncio side). ``first``:
        the seat's first segment (``messages`` is the whole prompt)."""

    # -- the harness ------------------------------------------------------------------

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        await self._drop(rollout)  # a first segment starts fresh
        gate = Gate(rollout)
        http = self._http(gate)
        model = self.make_model(http, rollout.boundary.model)
        built = self._checked(self._build(model, self.framework_tools(rollout, gate)))
        seat = Seat(gate, http, model, built, system=prompt.system_prompt)
        rollout.state["framework"] = seat
        await self._segment(seat, prompt.messages, True)

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        seat: Seat | None = rollout.state.get("framework")
        if seat is None:
            raise HarnessError(f"harness {self.id!r}: resume() before launch()")
        await self._segment(seat, messages, False)

    async def aclose(self, rollout: Rollout) -> None:
        await self._drop(rollout)

    async def _segment(self, seat: Seat, messages: Sequence[Message], first: bool) -> None:
        async with seat.gate.open_segment():
            try:
                await run_asyncio(self._run, seat, messages, first)
            except Exception as exc:
                if seat.gate.failure is not None:  # a refused or failed model call
                    raise seat.gate.failure from exc
                raise
            if seat.gate.failure is not None:  # the framework swallowed it
                raise seat.gate.failure

    async def _run(self, seat: Seat, messages: Sequence[Message], first: bool) -> None:
        """``run`` with the loop's default-executor jobs on the seat's own threads."""
        install(asyncio.get_running_loop())
        with seat_jobs(seat.workers):
            await self.run(seat, messages, first)

    async def _drop(self, rollout: Rollout) -> None:
        seat: Seat | None = rollout.state.pop("framework", None)
        if seat is not None:
            seat.gate.close()
            await run_asyncio(seat.http.aclose)
            seat.workers.close()

    # -- the factory --------------------------------------------------------------------

    @staticmethod
    def _http(gate: Gate) -> Any:
        import httpx2

        return httpx2.AsyncClient(transport=GateTransport(gate), base_url=BASE_URL)

    def _check_signature(self, factory: Any) -> int:
        """How many arguments the factory takes: 1 (``model``) or 2 (``model, tools``)."""
        where = f"harness_options.agent = {self.agent!r}"
        if not callable(factory):
            raise HarnessError(f"{where} is a {type(factory).__name__}, not a function")
        try:
            params = list(inspect.signature(factory).parameters.values())
        except (TypeError, ValueError):
            return 2
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            return 2
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        required = [p for p in params if p.default is p.empty and p.kind is not p.VAR_KEYWORD]
        if not positional or len(required) > 2:
            raise HarnessError(
                f"{where}: the factory takes ({', '.join(p.name for p in params)}); it must "
                f"take (model) or (model, tools) and return {self.returns}"
            )
        return min(len(positional), 2)

    def _build(self, model: Any, tools: list[Any]) -> Any:
        factory: Callable[..., Any] = self.factory
        try:
            return factory(model, tools) if self._arity == 2 else factory(model)
        except Exception as exc:
            raise HarnessError(
                f"harness_options.agent = {self.agent!r}: the factory raised "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def _checked(self, built: Any) -> Any:
        problem = self.refusal(built)
        if problem is None:
            return built
        hint = ""
        other = _FRAMEWORKS.get(type(built).__module__.partition(".")[0])
        if other is not None and other != self.id:
            hint = f"; did you mean --env.<role>.harness={other}?"
        raise HarnessError(
            f"harness_options.agent = {self.agent!r} returned {type(built).__qualname__}: "
            f"{problem}{hint}"
        )


@functools.cache
def _platform() -> Any:
    from openai._base_client import get_platform

    return get_platform()


def without_platform_thread(client: Any) -> Any:
    """``client`` (an ``openai.AsyncOpenAI``) told its platform up front. The SDK looks
    it up on a client's first request in a worker thread (``asyncify(get_platform)``),
    which would start a thread per rollout; the answer is the same for the process."""
    client._platform = _platform()
    return client


def tool_specs(rollout: Rollout, gate: Gate) -> list[tuple[Any, str, str, dict[str, Any]]]:
    """(call, name, description, JSON schema of its parameters) per rollout tool;
    ``await call(ToolCall)`` (trio side) runs the tool through ``gate.run_tool``."""
    specs = []
    for tool in as_tools(rollout.tools).values():
        fn = tool.schema["function"]
        call = functools.partial(gate.run_tool, tool)
        specs.append((call, tool.name, fn.get("description", ""), fn["parameters"]))
    return specs
