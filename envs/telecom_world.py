"""The shared world of ``telecom-lite``: one phone line, its account and the device,
the tools of both seats acting on it, and the one ordered log of their actions.

The whole state::

    Line    number, plan (basic | unlimited), status (active | suspended),
            provisioned (the SIM is provisioned), data_used_gb
    Device  airplane_mode, mobile_data, needs_restart (a line reset waits for a restart)

Invariants (``World.check`` raises ``AssertionError`` naming the broken one): the plan
and status are known values; data used is not negative; a restart is pending only
on a provisioned line (a reset provisions it). Every tool keeps them: a bad argument
comes back as the tool's ``Error: ...`` text and changes nothing.

The assistant's back office (``BackOffice``) sees the line and what the network sees
of the device (attached or not, a data session or not), never the device's settings;
the user's device (``Device``) sees its settings and the status bar, never the
account. Every tool call of either seat is appended to ``World.log`` (seat, tool,
arguments, result) in the order the calls ran.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

__all__ = ["PLANS", "BackOffice", "Device", "DeviceState", "Line", "World"]

PLANS = {"basic": 2.0, "unlimited": None}  # plan -> data cap in GB (None: no cap)
STATUSES = ("active", "suspended")


@attrs.define
class Line:
    number: str
    plan: str = "basic"
    status: str = "active"
    provisioned: bool = True
    data_used_gb: float = 0.5


@attrs.define
class DeviceState:
    airplane_mode: bool = False
    mobile_data: bool = True
    needs_restart: bool = False


@attrs.define
class World:
    """One episode's line and device, and the log of every action on them."""

    line: Line
    device: DeviceState = attrs.field(factory=DeviceState)
    log: list[dict[str, Any]] = attrs.field(factory=list)

    def check(self) -> None:
        """Raise ``AssertionError`` when an invariant does not hold."""
        line, device = self.line, self.device
        assert line.plan in PLANS, f"unknown plan {line.plan!r}"
        assert line.status in STATUSES, f"unknown status {line.status!r}"
        assert line.data_used_gb >= 0, "negative data use"
        assert line.provisioned or not device.needs_restart, "restart pending on no SIM"

    def over_cap(self) -> bool:
        cap = PLANS[self.line.plan]
        return cap is not None and self.line.data_used_gb >= cap

    def attached(self) -> bool:
        """The device is registered on the network (it has signal)."""
        d = self.device
        return self.line.provisioned and not d.airplane_mode and not d.needs_restart

    def data_works(self) -> bool:
        return (
            self.attached()
            and self.line.status == "active"
            and self.device.mobile_data
            and not self.over_cap()
        )

    def next_step(self) -> str:
        """The troubleshooting guide's next step, from what the back office sees."""
        n = self.line.number
        if self.line.status == "suspended":
            return (
                f"The line is suspended: call tool resume_line with phone_number: {n} to resume it."
            )
        if not self.line.provisioned:
            return (
                "The SIM is not provisioned: call tool reset_line with "
                f"phone_number: {n} to provision it."
            )
        if self.over_cap():
            return (
                f"The data cap of the {self.line.plan} plan is used up: call tool "
                f"change_plan with phone_number: {n}, plan: unlimited to lift it."
            )
        if self.device.needs_restart:
            return "The line was reset: the customer should call tool restart_device."
        if not self.attached():
            return "The device is not attached: the customer should call tool toggle_airplane_mode."
        if not self.data_works():
            return "No data session: the customer should call tool toggle_mobile_data."
        return "The line is in service with data; nothing left to do."

    def record(self, seat: str, tool: str, arguments: dict[str, Any], result: str) -> str:
        self.log.append({"seat": seat, "tool": tool, "arguments": arguments, "result": result})
        return result


class BackOffice:
    """The assistant's tools: the account side of ``world``."""

    def __init__(self, world: World) -> None:
        self.world = world

    def _line(self, phone_number: str) -> Line | str:
        if phone_number != self.world.line.number:
            return f"Error: no line {phone_number!r}; ask the customer for their phone_number"
        return self.world.line

    def _done(self, tool: str, args: dict[str, Any], text: str) -> str:
        self.world.check()
        return self.world.record("assistant", tool, args, text)

    def look_up_line(self, phone_number: str) -> str:
        """Look up a line: its plan, status, data use and what the network sees.

        Args:
            phone_number: the line's number, e.g. 555-0101
        """
        line, w = self._line(phone_number), self.world
        if isinstance(line, str):
            return self._done("look_up_line", {"phone_number": phone_number}, line)
        cap = PLANS[line.plan]
        text = (
            f"Line {line.number}: plan {line.plan} (cap {cap or 'none'} GB, used "
            f"{line.data_used_gb:g} GB), status {line.status}, SIM "
            f"{'provisioned' if line.provisioned else 'not provisioned'}, device "
            f"{'attached' if w.attached() else 'not attached'}. {w.next_step()}"
        )
        return self._done("look_up_line", {"phone_number": phone_number}, text)

    def resume_line(self, phone_number: str) -> str:
        """Resume a suspended line.

        Args:
            phone_number: the line's number
        """
        line = self._line(phone_number)
        if not isinstance(line, str):
            line.status = "active"
            line = f"Line {phone_number} is active. {self.world.next_step()}"
        return self._done("resume_line", {"phone_number": phone_number}, line)

    def change_plan(self, phone_number: str, plan: str) -> str:
        """Move a line to another plan.

        Args:
            phone_number: the line's number
            plan: basic or unlimited
        """
        args = {"phone_number": phone_number, "plan": plan}
        line = self._line(phone_number)
        if not isinstance(line, str):
            if plan not in PLANS:
                line = f"Error: no plan {plan!r}; plans: {', '.join(PLANS)}"
            else:
                line.plan = plan
                line = f"Line {phone_number} is on the {plan} plan. {self.world.next_step()}"
        return self._done("change_plan", args, line)

    def reset_line(self, phone_number: str) -> str:
        """Re-provision the line's SIM; the device must restart to pick it up.

        Args:
            phone_number: the line's number
        """
        line = self._line(phone_number)
        if not isinstance(line, str):
            line.provisioned = True
            self.world.device.needs_restart = True
            line = f"Line {phone_number} was reset. {self.world.next_step()}"
        return self._done("reset_line", {"phone_number": phone_number}, line)

    def all(self) -> tuple[Callable[..., str], ...]:
        """The tools in the order they are offered (the look-up first)."""
        return (self.look_up_line, self.resume_line, self.change_plan, self.reset_line)


class Device:
    """The user's tools: the phone in their hand."""

    def __init__(self, world: World) -> None:
        self.world = world

    def _done(self, tool: str, text: str) -> str:
        self.world.check()
        return self.world.record("user", tool, {}, f"{text} {self.status_text()}".strip())

    def status_text(self) -> str:
        w, d = self.world, self.world.device
        signal = "4 bars" if w.attached() else "no service"
        data = "LTE" if w.data_works() else "no data"
        return (
            f"Status bar: phone_number: {w.line.number} | signal: {signal} | {data} | "
            f"airplane mode {'on' if d.airplane_mode else 'off'} | "
            f"mobile data {'on' if d.mobile_data else 'off'}"
        )

    def read_status_bar(self) -> str:
        """Read the phone's status bar: number, signal, data, airplane mode."""
        return self._done("read_status_bar", "")

    def toggle_airplane_mode(self) -> str:
        """Switch airplane mode on or off."""
        d = self.world.device
        d.airplane_mode = not d.airplane_mode
        return self._done("toggle_airplane_mode", "Toggled airplane mode.")

    def toggle_mobile_data(self) -> str:
        """Switch mobile data on or off."""
        d = self.world.device
        d.mobile_data = not d.mobile_data
        return self._done("toggle_mobile_data", "Toggled mobile data.")

    def restart_device(self) -> str:
        """Restart the phone (it picks up a reset line)."""
        self.world.device.needs_restart = False
        return self._done("restart_device", "Restarted.")

    def all(self) -> tuple[Callable[..., str], ...]:
        """The tools in the order they are offered (the status bar first)."""
        return (
            self.read_status_bar,
            self.toggle_airplane_mode,
            self.toggle_mobile_data,
            self.restart_device,
        )
