"""The endpoint gate: a rollout's interception endpoint is open only while one of its
segments runs. Real hypercorn server on an ephemeral loopback port, real sessions, and
(for the adversary) a real ``program`` harness whose program leaves a child behind.
Real clock (docs/design.md "Testing": autojump + sockets gives false timeouts)."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import httpx2
import pytest
import trio
from scripted import ScriptedModel, Sleep
from segments import HoldingHarness, held_segment

from taketurns import Agent, AgentConfig, ChatSession, Limits, Task
from taketurns.errors import SessionError
from taketurns.harnesses.program import ProgramHarness
from taketurns.http import EndpointState, InterceptionServer, open_interception_server

LIMIT = 60
HELLO = {"messages": [{"role": "user", "content": "hello"}]}
MESSAGES = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
async def server() -> AsyncIterator[InterceptionServer]:
    async with open_interception_server(graceful_timeout=0.1) as running:
        yield running


@pytest.fixture
async def http(server: InterceptionServer) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=20) as client:  # closed before the server
        yield client


def agent(server: InterceptionServer, model: ScriptedModel, **config: object) -> Agent:
    return Agent(
        "agent",
        AgentConfig(model="scripted", **config),  # type: ignore[arg-type]
        client=model,
        harness=HoldingHarness(),
        services={"interception": server},
    )


async def test_the_endpoint_is_open_only_while_a_segment_runs(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    """Before the first segment, between segments and after close: 409 in every
    dialect's error shape, on every route of the rollout, and nothing recorded."""
    model = ScriptedModel(default="ok")
    with trio.fail_after(LIMIT):
        async with agent(server, model).chat(Task(0, prompt="go")) as session:
            async with held_segment(session) as endpoint:
                assert server.state(endpoint) is EndpointState.OPEN
                bearer = {"authorization": f"Bearer {endpoint.secret}"}
                chat_url = f"{endpoint.base_url}/chat/completions"
                during = await http.post(chat_url, json=HELLO, headers=bearer)
            assert server.state(endpoint) is EndpointState.IDLE
            key = {"x-api-key": endpoint.secret}
            between = {
                "chat": await http.post(chat_url, json=HELLO, headers=bearer),
                "shared": await http.post(
                    f"{server.url}/v1/chat/completions", json=HELLO, headers=bearer
                ),
                "responses": await http.post(
                    f"{endpoint.base_url}/responses", json={"input": "hi"}, headers=bearer
                ),
                "messages": await http.post(
                    f"{endpoint.base_url}/messages", json=MESSAGES, headers=key
                ),
                "count_tokens": await http.post(
                    f"{endpoint.base_url}/messages/count_tokens", json=MESSAGES, headers=key
                ),
                "tools": await http.post(
                    f"{endpoint.base_url}/tools/call", json={"name": "x"}, headers=bearer
                ),
            }
            turns_between = len(session.trace.turns)
        assert server.state(endpoint) is EndpointState.CLOSED
        after = await http.post(chat_url, json=HELLO, headers=bearer)
    assert during.status_code == 200
    assert {name: r.status_code for name, r in between.items()} == dict.fromkeys(between, 409)
    for name in ("chat", "shared", "responses", "tools"):  # OpenAI's error shape
        error = between[name].json()["error"]
        assert error["type"] == "rollout_idle", name
        assert "no segment of this rollout is running" in error["message"]
        assert "\n" not in error["message"]
    for name in ("messages", "count_tokens"):  # Anthropic's
        body = between[name].json()
        assert body["type"] == "error"
        assert body["error"]["type"] == "rollout_idle"
    assert after.status_code == 409
    assert after.json()["error"]["type"] == "rollout_closed"
    assert turns_between == 1
    assert len(session.trace.turns) == 1
    assert len(model.requests) == 1


async def test_a_call_in_flight_ends_with_its_segment_and_is_never_recorded(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    """The segment ends while its call waits on the model: the call is cancelled and
    answered 409, the segment's end waits for it, and the next segment is served."""
    model = ScriptedModel(Sleep(30), "second")
    results: list[httpx2.Response] = []
    with trio.fail_after(LIMIT):
        async with agent(server, model).chat(Task(0, prompt="go")) as session:
            async with held_segment(session) as endpoint:
                bearer = {"authorization": f"Bearer {endpoint.secret}"}
                chat_url = f"{endpoint.base_url}/chat/completions"

                async def call() -> None:
                    results.append(await http.post(chat_url, json=HELLO, headers=bearer))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(call)
                    while not model.requests:  # noqa: ASYNC110 - the server's own task
                        await trio.sleep(0.01)
                    session.harness.release.set()  # type: ignore[attr-defined]  # ends it
            recorded = len(session.trace.turns)
            # the next segment: the endpoint opens again
            harness = session.harness
            assert isinstance(harness, HoldingHarness)
            harness.opened, harness.release = trio.Event(), trio.Event()
            async with held_segment(session, "next") as again:
                second = await http.post(chat_url, json=HELLO, headers=bearer)
    [cut] = results
    assert cut.status_code == 409
    assert cut.json()["error"]["type"] == "rollout_idle"
    assert "segment ended" in cut.json()["error"]["message"]
    assert recorded == 0
    assert again == endpoint
    assert second.status_code == 200
    assert second.json()["choices"][0]["message"]["content"] == "second"
    assert [t.response.content for t in session.trace.turns if t.response] == ["second"]


# -- the adversary: a process left behind ------------------------------------------------

PROBE = textwrap.dedent(
    """
    import json, os, subprocess, sys, time, urllib.error, urllib.request

    def call(text):
        body = json.dumps({"messages": [{"role": "user", "content": text}]}).encode()
        request = urllib.request.Request(
            os.environ["OPENAI_BASE_URL"] + "/chat/completions",
            data=body,
            headers={
                "authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                "content-type": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, json.load(answer)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    if sys.argv[1] == "--late":  # the child left behind
        go, result = sys.argv[2], sys.argv[3]
        for round in ("idle", "closed"):
            while not os.path.exists(go + "." + round):
                time.sleep(0.02)
            status, body = call("sneak")
            with open(result + "." + round + ".tmp", "w") as out:
                json.dump({"status": status, "body": body}, out)
            os.rename(result + "." + round + ".tmp", result + "." + round)
        sys.exit(0)

    args = sys.argv[1:]
    output = args[args.index("--output-file") + 1]
    go, result = os.environ["PROBE_GO"], os.environ["PROBE_RESULT"]
    pidfile = os.environ["PROBE_PID"]
    if not os.path.exists(pidfile):  # the first segment hands its endpoint on
        with open(pidfile + ".tmp", "w") as out:
            json.dump([os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]], out)
        os.rename(pidfile + ".tmp", pidfile)
    status, body = call("segment")
    text = body["choices"][0]["message"]["content"] if status == 200 else ""
    with open(output, "w") as out:
        json.dump({"messages": [{"role": "assistant", "content": text}]}, out)
    """
)


async def _result(path: Path) -> dict[str, object]:
    """The left-behind child's answer, once it has written it."""
    with trio.fail_after(LIMIT):
        while not await trio.Path(path).exists():  # noqa: ASYNC110 - another process writes it
            await trio.sleep(0.02)
    result: dict[str, object] = json.loads(await trio.Path(path).read_text())
    return result


async def test_a_process_left_behind_by_a_segment_gets_409_and_adds_no_turn(
    server: InterceptionServer, tmp_path: Path
) -> None:
    """A real program hands its endpoint and key to a process outside its tree (the
    process owner kills everything the program itself leaves behind, so the outlier
    is one it got something else to start: here the test starts it), which calls the
    rollout's endpoint after the segment ended, then after the rollout closed: 409
    both times, no turn recorded, the limits untouched (the next segment's call is
    still within ``max_turns=2``)."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    go, result, pidfile = tmp_path / "go", tmp_path / "result", tmp_path / "pid"
    harness = ProgramHarness(
        [sys.executable, str(probe)],
        env={"PROBE_GO": str(go), "PROBE_RESULT": str(result), "PROBE_PID": str(pidfile)},
    )
    seat = Agent(
        "agent",
        AgentConfig(
            model="builtin/echo",
            harness="program",
            limits=Limits(max_turns=2),
            sandbox="none",  # the program writes the endpoint into tmp_path
        ),
        harness=harness,
        services={"interception": server},
    )
    late: trio.Process | None = None
    try:
        with trio.fail_after(LIMIT):
            async with seat.chat(Task(0, prompt="first")) as session:
                first = await session.turn()
                url, key = json.loads(pidfile.read_text())
                late = await trio.lowlevel.open_process(
                    [sys.executable, str(probe), "--late", str(go), str(result)],
                    env={**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": key},
                )
                endpoint = session.rollout.state["endpoint"]
                assert server.state(endpoint) is EndpointState.IDLE
                (tmp_path / "go.idle").touch()
                idle = await _result(tmp_path / "result.idle")
                turns_idle = len(session.trace.turns)
                second = await session.turn("second")
            (tmp_path / "go.closed").touch()
            closed = await _result(tmp_path / "result.closed")
    finally:
        if late is not None:  # the outsider is the test's to clean up
            late.kill()
            with trio.CancelScope(shield=True):
                await late.wait()
    assert not first.stopped
    assert idle["status"] == 409
    assert idle["body"]["error"]["type"] == "rollout_idle"  # type: ignore[index]
    assert turns_idle == 1
    assert not second.stopped, second.stop_condition  # max_turns=2 not spent by the child
    assert closed["status"] == 409
    assert closed["body"]["error"]["type"] == "rollout_closed"  # type: ignore[index]
    assert len(session.trace.turns) == 2
    assert "sneak" not in str(session.trace.turns)
    assert session.trace.stop_condition == "user_closed"


def _counting(seen: list[str]) -> httpx2.Client:
    """An HTTP client for an SDK that records each request it sends."""
    return httpx2.Client(event_hooks={"request": [lambda r: seen.append(str(r.url))]})


async def test_a_409_is_final_for_the_official_sdks(server: InterceptionServer) -> None:
    """OpenAI's and Anthropic's clients retry a bare 409; the gate's carry
    ``x-should-retry: false``, which both honour: one request each, no retry."""
    import anthropic
    import openai

    model = ScriptedModel(default="ok")
    with trio.fail_after(LIMIT):
        async with agent(server, model).chat(Task(0, prompt="go")) as session:
            async with held_segment(session) as endpoint:
                pass
            sent: dict[str, list[str]] = {"openai": [], "anthropic": []}
            oai = openai.OpenAI(
                base_url=endpoint.base_url,
                api_key=endpoint.secret,
                max_retries=2,
                http_client=_counting(sent["openai"]),
            )
            claude = anthropic.Anthropic(
                base_url=endpoint.base_url.removesuffix("/v1"),
                api_key=endpoint.secret,
                max_retries=2,
                http_client=_counting(sent["anthropic"]),
            )

            def ask_openai() -> None:
                with pytest.raises(openai.ConflictError) as refused:
                    oai.chat.completions.create(model="m", messages=[HELLO["messages"][0]])  # type: ignore[list-item]
                assert refused.value.response.headers["x-should-retry"] == "false"

            def ask_anthropic() -> None:
                with pytest.raises(anthropic.ConflictError):
                    claude.messages.create(**MESSAGES)  # type: ignore[arg-type]

            await trio.to_thread.run_sync(ask_openai)
            await trio.to_thread.run_sync(ask_anthropic)
            oai.close()
            claude.close()
    assert {name: len(urls) for name, urls in sent.items()} == {"openai": 1, "anthropic": 1}


async def test_the_memory_of_closed_rollouts_is_bounded(http: httpx2.AsyncClient) -> None:
    """The last ``remember_closed`` closed rollouts' keys answer 409 (closed); an
    older one is forgotten (401, unknown key): memory does not grow without bound."""
    async with open_interception_server(graceful_timeout=0.1, remember_closed=2) as server:
        endpoints = []
        with trio.fail_after(LIMIT):
            for i in range(3):
                seat = agent(server, ScriptedModel(default="ok"))
                async with seat.chat(Task(i, prompt="go")) as session, held_segment(session) as e:
                    endpoints.append(e)
            answers = []
            for endpoint in endpoints:
                bearer = {"authorization": f"Bearer {endpoint.secret}"}
                url = f"{endpoint.base_url}/chat/completions"
                answers.append((await http.post(url, json=HELLO, headers=bearer)).status_code)
    assert answers == [401, 409, 409]


async def test_a_served_tool_calling_back_into_its_own_session_is_refused(
    server: InterceptionServer, http: httpx2.AsyncClient
) -> None:
    """A program's tool call runs the rollout's Python tool in the server's handler
    task: the tool's ``turn()`` on its own session is refused at once with
    ``SessionError``, as it is in process (not left waiting for the session's lock)."""
    held: list[ChatSession] = []
    seen: list[BaseException] = []

    async def again(text: str) -> str:
        """Ask the agent's own session for another turn."""
        try:
            await held[0].turn(text)
        except SessionError as exc:
            seen.append(exc)
            return "refused"
        return "taken"

    model = ScriptedModel(default="ok")
    with trio.fail_after(LIMIT):
        async with agent(server, model).chat(Task(0, prompt="go"), tools=[again]) as session:
            held.append(session)
            async with held_segment(session) as endpoint:
                bearer = {"authorization": f"Bearer {endpoint.secret}"}
                body = {"id": "c1", "name": "again", "arguments": '{"text": "more"}'}
                url = f"{endpoint.base_url}/tools/call"
                answer = await http.post(url, json=body, headers=bearer)
    assert answer.status_code == 200
    assert answer.json()["content"] == "refused"
    assert len(seen) == 1
