"""``telecom-lite``: dual control. A customer whose phone has no service or no data
talks with a support agent; the fix needs both of them to act on one shared world.

Each task's world (``taketurns.envs.telecom_world``: one line, its account and the
device) is broken twice, once on each side, by its ``kind``:

- ``suspended``: the line is suspended (back office: ``resume_line``) and the phone
  is in airplane mode (device: ``toggle_airplane_mode``);
- ``data``: the basic plan's data cap is used up (``change_plan`` to unlimited) and
  mobile data is off (``toggle_mobile_data``);
- ``reset``: the SIM is not provisioned (``reset_line``), after which the phone must
  restart (``restart_device``).

The assistant (``assistant``) holds the back-office tools, the modeled user
(``user``, a session on the ``tools`` harness) the device's tools; both act on the
same world, in process. With ``user_tools = "mcp"`` the user's tools are served over
MCP instead (``taketurns.envs.telecom_mcp``: a server in the eval's process, on the
same world), with the same log and rewards. The env relays ``greeting -> user ->
assistant -> user ...`` until the user's reply contains ``done_marker``, a side
stops instead of answering, or ``exchanges`` user messages have reached the
assistant.

Every tool call of both seats lands, in order and attributed to its seat, in one
log: the same list is ``info["log"]`` of both traces, shown in the report as its own
section (``taketurns.envs.telecom_report``); ``info["final"]`` is the final world.
The ``resolved`` reward (both seats) is read from the final world: 1.0 iff the phone
has signal and a working data session. Both roles default to ``builtin/tools``
(``default_model``), which follows the back-office guide's ``call tool ...`` lines,
so the env runs offline with no flags; ``--model`` reaches both seats
(``default_model`` gives way to it), ``--env.<role>.model`` one.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Iterable
from typing import Any

import attrs

from taketurns import (
    AgentConfig,
    Agents,
    ChatSession,
    Env,
    EnvConfig,
    OptionError,
    Task,
    Trace,
    metric,
    reward,
)
from taketurns.env import int_between
from taketurns.envs.episode_mcp import McpService, python_or_mcp
from taketurns.envs.telecom_mcp import DeviceFace
from taketurns.envs.telecom_report import action_log, actions_per_episode
from taketurns.envs.telecom_world import BackOffice, Device, DeviceState, Line, World
from taketurns.report import EpisodeView, Figure, Section

__all__ = ["KINDS", "POLICY", "TelecomConfig", "TelecomLite", "make_world"]

KINDS = ("suspended", "data", "reset")
MODEL = "builtin/tools"
POLICY = (
    "You are a support agent of a mobile carrier. The customer's phone has a problem. "
    "Ask for their phone number, look the line up with your tools and follow the "
    "troubleshooting guide in the tools' answers: do the back-office steps yourself "
    "and tell the customer, in plain words, the steps they must take on their phone."
)
PERSONA = (
    "You are a customer talking with your mobile carrier's support agent. {scenario} "
    "Your phone's tools let you read its status bar and change its settings; you "
    "cannot see your account. Do on the phone what the agent asks, and tell them what "
    "the status bar shows. When your phone has signal and data again, reply with "
    "exactly {done} and nothing else."
)
SCENARIOS = {
    "suspended": "Your phone shows no service.",
    "data": "Your phone has signal but mobile data does not work.",
    "reset": "Your phone shows no service since this morning.",
}
GREETING = "Hello, this is your carrier's support. How can I help you today?"


def _kinds(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
    accepted = f"a comma-separated list of kinds from: {', '.join(KINDS)}"
    names = [k.strip() for k in value.split(",")] if isinstance(value, str) else []
    if not names or any(k not in KINDS for k in names):
        raise OptionError(attribute.name, value, accepted)


@attrs.define
class TelecomUser(AgentConfig):
    """The modeled user: not trainable unless told otherwise."""

    trainable: bool = False


@attrs.define
class TelecomConfig(EnvConfig):
    """``kinds``: the task kinds, dealt in turn; ``seed``: varies the phone numbers
    (unset: the run's ``--seed``);
    ``exchanges``: at most this many user messages reach the assistant;
    ``done_marker``: what the user says when the phone works again; ``user_tools``:
    the user's device tools ``python`` (in process) or ``mcp`` (over MCP, served by
    the eval on the same world)."""

    assistant: AgentConfig = attrs.field(factory=AgentConfig)
    user: TelecomUser = attrs.field(factory=TelecomUser)
    kinds: str = attrs.field(default=",".join(KINDS), validator=_kinds)
    seed: int | None = attrs.field(
        default=None,
        validator=attrs.validators.optional(int_between(0)),
        metadata={"unset": "the run's --seed"},
    )
    exchanges: int = attrs.field(default=6, validator=int_between(1, 100))
    done_marker: str = "###DONE###"
    user_tools: str = attrs.field(default="python", validator=python_or_mcp)


def make_world(kind: str, number: str) -> World:
    """The world of a ``kind`` task: one problem on each side."""
    if kind == "suspended":
        return World(Line(number, status="suspended"), DeviceState(airplane_mode=True))
    if kind == "data":
        return World(Line(number, data_used_gb=2.0), DeviceState(mobile_data=False))
    if kind == "reset":
        return World(Line(number, provisioned=False))
    raise ValueError(f"unknown kind {kind!r}; kinds: {', '.join(KINDS)}")


class TelecomLite(Env):
    id = "telecom-lite"
    config_class = TelecomConfig
    config: TelecomConfig

    def __init__(self, config: Any = None) -> None:
        super().__init__(config)
        self.mcp = McpService(DeviceFace, "user_tools")

    def services(self) -> contextlib.AbstractAsyncContextManager[None]:
        """With ``user_tools = "mcp"``: the MCP server of this eval's devices."""
        return self.mcp.services(self.config.user_tools == "mcp")

    def tasks(self, num_tasks: int) -> list[Task]:
        kinds = [k.strip() for k in self.config.kinds.split(",")]
        rng = random.Random(f"telecom-lite/{self.seed_of(self.config.seed)}")
        out = []
        for i in range(num_tasks):
            kind, number = kinds[i % len(kinds)], f"555-{rng.randrange(10**4):04d}"
            info = {"kind": kind, "phone_number": number}
            out.append(Task(i, f"telecom-lite/{i}/{kind}", SCENARIOS[kind], POLICY, info=info))
        return out

    def default_harness(self, role: str) -> str:
        return "tools"

    def default_model(self, role: str) -> str:
        """``builtin/tools`` (it follows the guide's ``call tool ...`` lines), for a
        role whose model neither ``--env.<role>.model`` nor ``--model`` names."""
        return MODEL

    async def run(self, task: Task, agents: Agents) -> None:
        world = make_world(task.info["kind"], task.info["phone_number"])
        async with self._device_tools(Device(world)) as device_tools:
            await self._play(task, agents, world, device_tools)

    @contextlib.asynccontextmanager
    async def _device_tools(self, device: Device) -> AsyncIterator[tuple[Any, ...]]:
        """The user's tools: ``device``'s own, or the same served over MCP."""
        if self.config.user_tools == "python":
            yield device.all()
            return
        async with self.mcp.open(device, "device") as (tools, _):
            yield tools

    async def _play(
        self, task: Task, agents: Agents, world: World, device_tools: tuple[Any, ...]
    ) -> None:
        persona = PERSONA.format(scenario=task.prompt_text(), done=self.config.done_marker)
        state = {"world": world}
        async with (
            agents.user.chat(
                Task(task.idx, task.name, system_prompt=persona),
                tools=device_tools,
                state=state,
            ) as user,
            agents.assistant.chat(
                task, mask_prompt=True, tools=BackOffice(world).all(), state=state
            ) as assistant,
        ):
            for trace in (user.trace, assistant.trace):
                trace.info["log"] = world.log
            ended_by = await self._relay(user, assistant)
            final = attrs.asdict(world, filter=_no_log)
            for trace in (user.trace, assistant.trace):
                del trace.info["log"]  # put back last: the short facts read first
                trace.info.update(ended_by=ended_by, final=final, log=world.log)

    async def _relay(self, user: ChatSession, assistant: ChatSession) -> str:
        """Relay until the user is done, a side stops or the exchanges run out."""
        marker = self.config.done_marker.strip()
        said = await user.turn(GREETING)
        for _ in range(self.config.exchanges):
            if said.stopped:
                return "user_stopped"
            if marker in said.text:
                return "done"
            answer = await assistant.turn(said.text)
            if answer.stopped:
                return "assistant_stopped"
            said = await user.turn(answer.text)
        return "exchanges"

    def report_figures(self, episodes: Iterable[EpisodeView]) -> list[Figure]:
        """How many actions each seat took per episode (and which tools)."""
        return [actions_per_episode(episodes)]

    def report_sections(self, episodes: Iterable[EpisodeView]) -> list[Section]:
        """The attributed log of both seats' actions, per episode."""
        return [action_log(episodes)]

    @reward
    def resolved(self, task: Task, trace: Trace) -> float:
        """1.0 iff the final world's phone has signal and a working data session."""
        world = trace.state["world"]
        world.check()
        return float(world.data_works())

    @metric
    def assistant_actions(self, task: Task, trace: Trace) -> float:
        """Tool calls the assistant made."""
        return float(sum(e["seat"] == "assistant" for e in trace.info.get("log", ())))

    @metric
    def user_actions(self, task: Task, trace: Trace) -> float:
        """Tool calls the user made on the device."""
        return float(sum(e["seat"] == "user" for e in trace.info.get("log", ())))


def _no_log(attribute: attrs.Attribute[Any], value: object) -> bool:
    return attribute.name != "log"
