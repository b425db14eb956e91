"""Per-segment cost of the agent-framework harnesses (``openai-agents``, ``pydantic-ai``,
``langgraph``) beside the ``tools`` harness, on the in-process built-in model, and of
the two ways a framework can reach the model: the in-process transport the harnesses
use (``taketurns.harnesses.framework_gate``) and the interception server over loopback
(what an out-of-process agent uses), with the same openai-agents seat.

Each row: ``--chats`` chats of ``--turns`` turns (one segment each, one model call a
segment: ``builtin/echo``, no tools), ``--concurrency`` chats at once, inside one
trio-asyncio host (as ``taketurns eval`` runs them). CPU seconds of the process per
segment (``time.process_time``) and wall time per segment, median of ``--repeats``.
Run: ``python benchmarks/bench_frameworks.py`` (about a minute; needs
``pip install 'taketurns[openai-agents,pydantic-ai,langgraph]'``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import trio

from taketurns import Agent, AgentConfig, Message, Task
from taketurns._eval.aio import open_asyncio_host
from taketurns.harness import Prompt, Rollout, run_asyncio
from taketurns.harnesses.framework import Seat, without_platform_thread
from taketurns.harnesses.framework_gate import Gate
from taketurns.harnesses.openai_agents import OpenAIAgentsHarness
from taketurns.http import InterceptionServer, open_interception_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = {
    "openai-agents": "agents_sdk_seat.py",
    "pydantic-ai": "pydantic_ai_seat.py",
    "langgraph": "langgraph_seat.py",
}


class LoopbackAgents(OpenAIAgentsHarness):
    """The openai-agents seat with its OpenAI client pointed at the interception server
    over loopback (the rollout's URL and secret, its own httpx2 pool on the asyncio
    side), the endpoint gated by the server: the alternative the harness does not take."""

    async def launch(self, rollout: Rollout, prompt: Prompt) -> None:
        import httpx2
        from agents import OpenAIChatCompletionsModel
        from openai import AsyncOpenAI

        server: InterceptionServer = rollout.services["interception"]
        endpoint = server.register(rollout)
        http = httpx2.AsyncClient()
        client = AsyncOpenAI(
            api_key=endpoint.secret, base_url=endpoint.base_url, max_retries=0, http_client=http
        )
        model = OpenAIChatCompletionsModel(
            model=rollout.boundary.model, openai_client=without_platform_thread(client)
        )
        seat = Seat(Gate(None), http, model, self._build(model, []), system=prompt.system_prompt)
        rollout.state["loopback"] = (seat, endpoint)
        async with server.open_segment(endpoint):
            await run_asyncio(self.run, seat, prompt.messages, True)

    async def resume(self, rollout: Rollout, messages: Sequence[Message]) -> None:
        seat, endpoint = rollout.state["loopback"]
        async with rollout.services["interception"].open_segment(endpoint):
            await run_asyncio(self.run, seat, messages, False)

    async def aclose(self, rollout: Rollout) -> None:
        seat, endpoint = rollout.state.pop("loopback")
        rollout.services["interception"].unregister(endpoint)
        await run_asyncio(seat.http.aclose)


def _agent(kind: str, server: InterceptionServer | None) -> Agent:
    if kind == "tools":
        return Agent("seat", AgentConfig(model="builtin/echo", harness="tools"))
    framework = "openai-agents" if kind == "openai-agents (loopback)" else kind
    reference = f"{ROOT / 'examples' / EXAMPLES[framework]}:make"
    config = AgentConfig(
        model="builtin/echo", harness=framework, harness_options={"agent": reference}
    )
    if kind == "openai-agents (loopback)":
        return Agent(
            "seat",
            config,
            harness=LoopbackAgents(reference),
            services={"interception": server},
        )
    return Agent("seat", config)


async def _chats(agent: Agent, chats: int, turns: int, concurrency: int) -> None:
    limiter = trio.CapacityLimiter(concurrency)

    async def chat(i: int) -> None:
        async with limiter, agent.chat(Task(i, f"chat-{i}", None)) as session:
            for t in range(turns):
                reply = await session.turn(f"message {t} of chat {i}")
                assert not reply.stopped, reply
            assert len(session.trace.turns) == turns

    async with trio.open_nursery() as nursery:
        for i in range(chats):
            nursery.start_soon(chat, i)


async def _measure(kind: str, args: argparse.Namespace) -> tuple[float, float]:
    """(CPU seconds, wall seconds) per segment, the median of ``args.repeats`` runs."""
    cpu, wall = [], []
    async with open_interception_server() as server, open_asyncio_host():
        agent = _agent(kind, server)
        await _chats(agent, 2, 2, 2)  # warm up: imports, the loop, the first clients
        for _ in range(args.repeats):
            c0, w0 = time.process_time(), time.perf_counter()
            await _chats(agent, args.chats, args.turns, args.concurrency)
            segments = args.chats * args.turns
            cpu.append((time.process_time() - c0) / segments)
            wall.append((time.perf_counter() - w0) / segments)
    return statistics.median(cpu), statistics.median(wall)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chats", type=int, default=40)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    kinds = ["tools", "openai-agents", "openai-agents (loopback)", "pydantic-ai", "langgraph"]
    rows = [(kind, *trio.run(_measure, kind, args)) for kind in kinds]
    base = rows[0][1]
    print(
        f"{args.chats} chats x {args.turns} turns, {args.concurrency} at once, builtin/echo, "
        f"median of {args.repeats}"
    )
    print(f"{'harness':<26} {'CPU ms/segment':>15} {'wall ms/segment':>16} {'x tools':>8}")
    for kind, cpu, wall in rows:
        print(f"{kind:<26} {cpu * 1e3:>15.2f} {wall * 1e3:>16.2f} {cpu / base:>8.1f}")


if __name__ == "__main__":
    main()
