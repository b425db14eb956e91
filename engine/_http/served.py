"""``ServedHarness``: the base of harnesses whose agent program reaches the model over
HTTP, through the interception server (``taketurns._http.interception``)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, ClassVar

import trio

from taketurns._errors import HarnessError
from taketurns._exchange.harness import Harness, Rollout
from taketurns._http.interception import Endpoint, InterceptionServer

__all__ = ["ServedHarness"]


class ServedHarness(Harness):
    """Base of harnesses whose agent program calls the model over HTTP. The eval
    runner starts the interception server when any role's harness is one; outside an
    eval, pass ``services={"interception": server}`` to the ``Agent``.

    ``endpoint(rollout)`` registers the rollout on first use; every segment opens
    its endpoint for the segment's duration only (``open_segment``: 409 between
    segments); ``aclose`` (at session close) unregisters it, so its secret stops
    working. A harness whose program
    re-sends failed requests unmarked, with no way to turn that off, sets
    ``final_failures`` (see ``InterceptionServer.register``)."""

    final_failures: ClassVar[bool] = False

    def endpoint(self, rollout: Rollout) -> Endpoint:
        endpoint: Endpoint | None = rollout.state.get("endpoint")
        if endpoint is None:
            server = rollout.services.get("interception")
            if not isinstance(server, InterceptionServer):
                raise HarnessError(
                    f"harness {self.id!r} needs the interception server: run it under "
                    "`taketurns eval`, or open one with open_interception_server() and pass "
                    "Agent(..., services={'interception': server})"
                )
            if self.final_failures:
                endpoint = server.register(rollout, final_failures=True)
            else:
                endpoint = server.register(rollout)
            rollout.state["endpoint"] = endpoint
        return endpoint

    def open_segment(self, rollout: Rollout) -> AbstractAsyncContextManager[Any]:
        """The rollout's endpoint, open for this segment only (registered on first use):
        between segments and after close it answers 409 and records nothing, and the
        segment's model calls still in flight when it ends are cancelled."""
        endpoint = self.endpoint(rollout)
        server: InterceptionServer = rollout.services["interception"]
        return server.open_segment(endpoint)

    def end_segment(self, rollout: Rollout) -> None:
        """Close the endpoint before the segment ends (its program is gone): requests
        answer 409 and model calls still in flight are cancelled."""
        endpoint = rollout.state.get("endpoint")
        if endpoint is not None:
            rollout.services["interception"].cancel_inflight(endpoint)

    async def aclose(self, rollout: Rollout) -> None:
        endpoint = rollout.state.pop("endpoint", None)
        if endpoint is not None:
            rollout.services["interception"].unregister(endpoint)
        await trio.lowlevel.checkpoint()
