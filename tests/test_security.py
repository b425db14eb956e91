"""The interception server as an attack surface.

Hypothesis fuzzes bodies, headers (``Authorization`` variants included) and raw bytes
against one running server holding a few registered rollouts (and one closed one):
no request without a rollout's own secret reads or writes its trace, the server never
answers 5xx, and a closed rollout's secret is dead. A real eval with program harnesses
checks that no secret reaches the logs, traces, JSONL or report, and the server binds
loopback unless configured otherwise.

Hypothesis drives a synchronous HTTP client from a worker thread
(``trio.to_thread``) while the server runs in the test's trio loop: one server per
test, fresh requests per example (docs/design.md "Testing": no per-example fixtures). Real clock.
"""

from __future__ import annotations

import json
import logging
import socket
import string
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx2
import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from scripted import ScriptedModel, Sleep
from segments import HoldingHarness, held_segment

from taketurns import Agent, AgentConfig, ChatSession, EvalConfig, Task
from taketurns._cli.main import main
from taketurns._http.server import serve
from taketurns._models.builtin import BuiltinModel
from taketurns.harness import Endpoint, Rollout
from taketurns.http import InterceptionServer, open_interception_server

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
LIMIT = 120
HELLO = {"messages": [{"role": "user", "content": "hello"}]}
RETRY = "x-stainless-retry-count"


def lookup(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: The order's id.
    """
    return f"order {order_id} shipped"


@attrs.define
class Target:
    endpoint: Endpoint
    session: ChatSession

    @property
    def turns(self) -> int:
        return len(self.session.trace.turns)


@asynccontextmanager
async def registered(server: InterceptionServer, n: int) -> AsyncIterator[list[Target]]:
    """``n`` open rollouts, each in a running segment (the first offers a tool), plus
    a closed one, last."""
    async with AsyncExitStack() as stack:
        targets = []
        for i in range(n + 1):
            agent = Agent(
                f"agent{i}",
                AgentConfig(model="scripted"),
                client=ScriptedModel(default=f"answer {i}"),
                harness=HoldingHarness(),
                services={"interception": server},
                tools=[lookup] if i == 0 else (),
            )
            session = await stack.enter_async_context(agent.chat(Task(i, prompt="go")))
            endpoint = await stack.enter_async_context(held_segment(session))
            targets.append(Target(endpoint, session))
        await targets[-1].session.close()  # its secret is dead from now on
        yield targets


class Captured(logging.Handler):
    """Every record logged anywhere, formatted with its exception, at DEBUG."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


@contextmanager
def all_logs() -> Iterator[Captured]:
    root = logging.getLogger()
    handler, level = Captured(), root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


# -- what a fuzzed request is made of -------------------------------------------------------

TEXT = st.text(string.ascii_letters + string.digits + string.punctuation + " ", max_size=40)
# header values: printable, non-empty, no surrounding whitespace (what a client can send)
WORD = st.text(string.ascii_letters + string.digits + string.punctuation, min_size=2, max_size=40)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool", "developer", "x"])},
    optional={"content": JSON | TEXT, "tool_calls": JSON, "tool_call_id": JSON, "name": JSON},
)
TOOL = st.fixed_dictionaries(
    {"type": st.just("function") | JSON, "function": JSON | st.fixed_dictionaries({"name": JSON})}
)
SAYING = st.fixed_dictionaries({"role": st.just("user"), "content": TEXT})
SAMPLING = {
    "model": JSON,
    "stream": JSON,
    "stream_options": JSON,
    "max_tokens": JSON,
    "max_completion_tokens": JSON,
    "seed": JSON,
    "temperature": JSON,
}
CHAT = st.fixed_dictionaries(
    {"messages": st.lists(SAYING, min_size=1, max_size=2) | st.lists(MESSAGE, max_size=3) | JSON},
    optional={**SAMPLING, "tools": st.lists(TOOL | JSON, max_size=2) | JSON},
)
CHAT_WITH_TOOLS = st.fixed_dictionaries(
    {"messages": st.lists(SAYING, min_size=1, max_size=2), "tools": st.lists(TOOL, max_size=2)},
    optional=SAMPLING,
)
GOOD_BYTES = json.dumps({"messages": [{"role": "user", "content": "hello"}]}).encode()
GOOD = st.just(GOOD_BYTES)
# found by this fuzzer: a tool whose "function" is not an object was a 500 (and a model
# call that was never recorded)
BAD_TOOLS = json.dumps({**json.loads(GOOD_BYTES), "tools": [{"function": "x"}]}).encode()
TOOL_CALL = st.fixed_dictionaries(
    {"name": st.sampled_from(["lookup", "nope"]) | JSON},
    optional={"id": JSON, "arguments": JSON | TEXT},
)


def encode(body: Any) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body).encode()


BODIES = st.one_of(
    st.binary(max_size=200),
    JSON.map(encode),
    CHAT.map(encode),
    CHAT_WITH_TOOLS.map(encode),
    GOOD,
    TOOL_CALL.map(encode),
)

# how the Authorization header is made from a secret (the target's, another's, ...)
AUTH_SHAPES: dict[str, Callable[[str], str]] = {
    "bearer": lambda s: f"Bearer {s}",
    "lowercase scheme": lambda s: f"bearer {s}",
    "padded": lambda s: f"Bearer   {s}",
    "basic": lambda s: f"Basic {s}",
    "bare": lambda s: s,
    "token": lambda s: f"Token {s}",
    "suffixed": lambda s: f"Bearer {s}x",
    "truncated": lambda s: f"Bearer {s[:-1]}",
    "swapped case": lambda s: f"Bearer {s.swapcase()}",
    "doubled": lambda s: f"Bearer {s} {s}",
}
ACCEPTED_SHAPES = {"bearer", "lowercase scheme", "padded"}


@attrs.frozen
class Plan:
    """One fuzzed request, resolved against the registered rollouts."""

    path: tuple[str, int]  # (kind, which rollout) kind: own | shared | tool | stranger | junk
    auths: tuple[tuple[str, int | None, str], ...]  # (shape, whose secret, random text)
    retry: str | None
    extra: tuple[tuple[str, str], ...]
    body: bytes


@st.composite
def plans(draw: st.DrawFn, n: int) -> Plan:
    who = st.integers(0, n)  # n is the closed rollout
    auth = st.tuples(st.sampled_from(sorted(AUTH_SHAPES)), st.none() | who, WORD)
    header_name = st.text(string.ascii_lowercase + "-", min_size=1, max_size=12).filter(
        lambda h: h not in ("authorization", "content-length", "host", "transfer-encoding")
    )
    path = (draw(st.sampled_from(["own", "shared", "tool", "stranger", "junk"])), draw(who))
    auths = draw(st.lists(auth, max_size=3))
    if draw(st.booleans()):  # half the time, lead with the target's own secret
        auths.insert(0, (draw(st.sampled_from(sorted(ACCEPTED_SHAPES))), path[1], "xx"))
    return Plan(
        path=path,
        auths=tuple(auths),
        retry=draw(st.none() | st.sampled_from(["0", "1", "2", "-1", "x", "9" * 20])),
        extra=tuple(draw(st.lists(st.tuples(header_name, WORD), max_size=3))),
        body=draw(BODIES),
    )


def url_of(plan: Plan, targets: list[Target], root: str) -> str:
    kind, i = plan.path
    base = targets[i].endpoint.base_url
    return {
        "own": f"{base}/chat/completions",
        "shared": f"{root}/v1/chat/completions",
        "tool": f"{base}/tools/call",
        "stranger": f"{root}/rollouts/{'0' * 16}/v1/chat/completions",
        "junk": f"{root}/rollouts/{i}/v2/../chat",
    }[kind]


def authorized(plan: Plan, targets: list[Target]) -> set[int]:
    """The open rollouts whose own secret this request carries, in an accepted shape."""
    holders = set()
    for shape, whose, _ in plan.auths:
        if whose is not None and whose < len(targets) - 1 and shape in ACCEPTED_SHAPES:
            holders.add(whose)
    return holders


def headers_of(plan: Plan, targets: list[Target]) -> list[tuple[str, str]]:
    headers = list(plan.extra)
    for shape, whose, text in plan.auths:
        secret = targets[whose].endpoint.secret if whose is not None else text
        headers.append(("authorization", AUTH_SHAPES[shape](secret)))
    if plan.retry is not None:
        headers.append(("x-stainless-retry-count", plan.retry))
    return headers


async def test_fuzzed_requests_never_touch_a_trace_without_its_secret() -> None:
    with all_logs() as logs, trio.fail_after(LIMIT):
        async with (
            open_interception_server(graceful_timeout=0.1) as server,
            registered(server, 3) as targets,
        ):
            token = trio.lowlevel.current_trio_token()
            secrets = [t.endpoint.secret for t in targets]
            statuses: dict[int, int] = {}

            def snapshot() -> list[int]:
                return trio.from_thread.run_sync(
                    lambda: [t.turns for t in targets], trio_token=token
                )

            def fuzz() -> None:
                with httpx2.Client(timeout=5) as http:

                    @FUZZ
                    @given(plan=plans(len(targets) - 1))
                    @example(plan=Plan(("own", 0), (("bearer", 0, "xx"),), None, (), GOOD_BYTES))
                    @example(plan=Plan(("shared", 3), (("bearer", 3, "xx"),), None, (), GOOD_BYTES))
                    @example(plan=Plan(("own", 1), (), None, (), GOOD_BYTES))
                    @example(plan=Plan(("own", 1), (("bearer", 1, "xx"),), None, (), b"{"))
                    @example(plan=Plan(("own", 2), (("bearer", 2, "xx"),), None, (), BAD_TOOLS))
                    def one(plan: Plan) -> None:
                        before = snapshot()
                        response = http.post(
                            url_of(plan, targets, server.url),
                            content=plan.body,
                            headers=headers_of(plan, targets),
                        )
                        after = snapshot()
                        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                        check(plan, response, before, after)

                    one()

            def check(
                plan: Plan, response: httpx2.Response, before: list[int], after: list[int]
            ) -> None:
                assert response.status_code < 500, response.text
                for secret in secrets:
                    assert secret not in response.text
                kind, i = plan.path
                holders = authorized(plan, targets)
                changed = {j for j, (b, a) in enumerate(zip(before, after, strict=True)) if a != b}
                assert changed <= holders, f"{changed} changed without their secret"
                if response.status_code == 200 and kind in ("own", "shared"):
                    shape, owner, _ = plan.auths[0]  # the first header decides
                    assert shape in ACCEPTED_SHAPES
                    assert owner in holders
                    assert kind == "shared" or owner == i
                    step = after[owner] - before[owner]
                    retried = plan.retry not in (None, "0", "-1", "x")
                    assert step == 1 or (retried and step == 0)
                    if response.headers["content-type"].startswith("text/event-stream"):
                        assert response.text.endswith("data: [DONE]\n\n")  # "stream": truthy
                    else:
                        answer = response.json()["choices"][0]["message"]["content"]
                        assert answer == f"answer {owner}"
                else:
                    assert changed == set(), (response.status_code, response.text)
                if kind in ("stranger", "junk") or not holders:
                    assert 400 <= response.status_code < 500, response.text
                if not holders and kind != "junk":
                    assert response.status_code in (401, 409), response.text
                if not holders:  # nothing of any rollout is read back either
                    assert "answer" not in response.text
                if response.status_code >= 400:
                    assert "error" in response.json()

            await trio.to_thread.run_sync(fuzz)
    assert targets[-1].turns == 0  # the closed rollout never moved
    print(f"FIGURES fuzzed statuses={sorted(statuses.items())}")
    assert {200, 400, 401, 409} <= set(statuses)
    assert logs.lines
    for secret in secrets:
        assert secret not in logs.text


async def test_raw_garbage_on_the_socket_is_refused_without_5xx() -> None:
    with trio.fail_after(LIMIT):
        async with (
            open_interception_server(graceful_timeout=0.1) as server,
            registered(server, 2) as targets,
        ):
            host, port = server.url.removeprefix("http://").rsplit(":", 1)
            seen: dict[str, int] = {}

            def fuzz() -> None:
                @settings(max_examples=100, deadline=None)
                @given(
                    data=st.binary(min_size=1, max_size=300),
                    prefix=st.sampled_from([b"", b"POST /v1/chat/completions HTTP/1.1\r\n"]),
                )
                def one(data: bytes, prefix: bytes) -> None:
                    with socket.create_connection((host, int(port)), timeout=10) as sock:
                        sock.sendall(prefix + data + b"\r\n\r\n")
                        sock.shutdown(socket.SHUT_WR)
                        answer = b""
                        while chunk := sock.recv(65536):
                            answer += chunk
                    status = (
                        answer.split(b" ", 2)[1][:3] if answer.startswith(b"HTTP/") else b"none"
                    )
                    seen[status.decode()] = seen.get(status.decode(), 0) + 1
                    assert not status.startswith(b"5"), answer

                one()

            await trio.to_thread.run_sync(fuzz)
            assert [t.turns for t in targets] == [0, 0, 0]
    print(f"FIGURES raw statuses={sorted(seen.items())}")


async def test_refusals_close_the_connection_so_keep_alive_never_stalls() -> None:
    """Found by the fuzzer: on a kept-alive connection whose last request body went
    unread (a 401 is sent before the body is read), hypercorn could leave the next
    request unanswered until the client timed out. Refusals now close the connection."""
    with trio.fail_after(LIMIT):
        async with (
            open_interception_server(graceful_timeout=0.1) as server,
            registered(server, 1) as targets,
            httpx2.AsyncClient(timeout=5) as http,
        ):
            url = f"{targets[0].endpoint.base_url}/chat/completions"
            closed = {"authorization": f"Bearer {targets[-1].endpoint.secret}"}
            for i in range(60):
                headers = [{"authorization": "Bearer wrong"}, closed, {}][i % 3]
                body = GOOD_BYTES if i % 2 else b""
                response = await http.post(url, content=body, headers=headers)
                assert response.status_code in (401, 409)
                assert response.headers["connection"] == "close"
            missing = await http.post(f"{server.url}/nowhere", content=GOOD_BYTES)
            assert missing.status_code == 404
            assert missing.headers["connection"] == "close"
            ok = await http.post(
                url,
                content=GOOD_BYTES,
                headers={"authorization": f"Bearer {targets[0].endpoint.secret}"},
            )
            assert ok.status_code == 200
            assert ok.headers.get("connection") != "close"


async def test_the_builtin_servers_refusals_close_the_connection_too() -> None:
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery, httpx2.AsyncClient(timeout=5) as http:
            url = await nursery.start(partial(serve, BuiltinModel("echo"), port=0))
            for i in range(20):
                body = GOOD_BYTES if i % 2 else b""
                missing = await http.post(url.removesuffix("/v1") + "/nowhere", content=body)
                assert missing.status_code == 404
                assert missing.headers["connection"] == "close"
            nursery.cancel_scope.cancel()


# -- a closed rollout's secret is dead -------------------------------------------------------


async def test_a_secret_is_useless_once_its_rollout_closes() -> None:
    with trio.fail_after(LIMIT):
        async with (
            open_interception_server(graceful_timeout=0.1) as server,
            httpx2.AsyncClient(timeout=20) as http,
        ):
            model = ScriptedModel(Sleep(30), "late")  # the first call hangs in the model
            agent = Agent(
                "agent",
                AgentConfig(model="scripted"),
                client=model,
                harness=HoldingHarness(),
                services={"interception": server},
                tools=[lookup],
            )
            auth = {}
            results: list[httpx2.Response] = []
            chat = agent.chat(Task(0, prompt="go"))
            async with chat as session, held_segment(session) as endpoint:
                auth = {"authorization": f"Bearer {endpoint.secret}"}
                chat_url = f"{endpoint.base_url}/chat/completions"

                async def in_flight() -> None:
                    results.append(await http.post(chat_url, json=HELLO, headers=auth))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(in_flight)
                    while not model.requests:  # noqa: ASYNC110 - the server's own task
                        await trio.sleep(0.01)
                    await session.close()  # ends the segment: cancels the call in flight
            [cut] = results
            assert cut.status_code == 409
            assert cut.json()["error"]["type"] == "rollout_idle"
            assert "segment ended" in cut.json()["error"]["message"]
            after = [
                await http.post(chat_url, json=HELLO, headers=auth),
                await http.post(f"{server.url}/v1/chat/completions", json=HELLO, headers=auth),
                await http.post(
                    f"{endpoint.base_url}/tools/call",
                    json={"name": "lookup", "arguments": '{"order_id": "A1"}'},
                    headers=auth,
                ),
                await http.post(chat_url, json=HELLO, headers={**auth, **{RETRY: "1"}}),
            ]
    assert [r.status_code for r in after] == [409] * 4
    assert session.trace.turns == []  # nothing was recorded, before or after the close
    assert len(model.requests) == 1


# -- no secret in the logs, traces, JSONL or report -------------------------------------------

SEAT_PROGRAM = """
import json, os, re, runpy, sys
args = sys.argv[1:]
prompt = json.load(open(args[args.index("--prompt-file") + 1]))
out = args[args.index("--output-file") + 1]
key = os.environ["OPENAI_API_KEY"]
hand = re.search(r"hand #(\\d+)", json.dumps(prompt["messages"])).group(1)
if hand == "1":  # a crash that prints its key everywhere it can
    print("my key is", key); print("key:", key, file=sys.stderr); sys.exit(1)
if hand == "2":  # an output file that carries the key into a parse error
    json.dump({"messages": [{"role": key, "content": key}]}, open(out, "w")); sys.exit(0)
sys.argv = [sys.argv[0], *args]
runpy.run_module("taketurns.harnesses.programs.chat", run_name="__main__")
"""


@pytest.mark.slow
def test_secrets_never_reach_logs_traces_jsonl_or_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    endpoints: list[Endpoint] = []
    register = InterceptionServer.register

    def spy(self: InterceptionServer, rollout: Rollout) -> Endpoint:
        endpoint = register(self, rollout)
        endpoints.append(endpoint)
        return endpoint

    monkeypatch.setattr(InterceptionServer, "register", spy)
    out = tmp_path / "run"
    command = json.dumps([sys.executable, "-c", SEAT_PROGRAM])
    argv = [
        "eval", "kuhn-poker", "-n", "4", "-c", "2", "-o", str(out), "--no-progress",
        "--env.player0.harness=program", f"--env.player0.harness_options.command={command}",
        "--env.player1.harness=stateful",
    ]  # fmt: skip
    with all_logs() as logs:
        assert main(argv) == 1  # hands 1 and 2: the seat's harness failed (exit 1)
    printed = capsys.readouterr()
    secrets = [e.secret for e in endpoints]
    assert len(secrets) == 6  # both seats of hands 0 and 3; seat 0 alone of 1 and 2
    assert all(e.base_url.startswith("http://127.0.0.1:") for e in endpoints)  # loopback
    files = sorted(p for p in out.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"episodes.jsonl", "summary.json", "report.html"}
    texts = {str(p): p.read_text(encoding="utf-8", errors="replace") for p in files}
    texts["logs"] = logs.text
    texts["stdout"], texts["stderr"] = printed.out, printed.err
    for where, text in texts.items():
        for secret in secrets:
            assert secret not in text, f"a secret leaked into {where}"
        assert "Bearer " not in text, where
    episodes = [json.loads(line) for line in texts[str(out / "episodes.jsonl")].splitlines()]
    seat0 = {e["task"]["idx"]: e["traces"][0] for e in episodes}
    assert seat0[1]["stop_condition"] == "harness_error"
    assert "my key is ***" in seat0[1]["errors"][0]["message"]  # scrubbed, not dropped
    assert seat0[2]["stop_condition"] == "harness_error"
    assert "***" in seat0[2]["errors"][0]["message"]
    assert seat0[0]["stop_condition"] == "user_closed"
    print(f"FIGURES secrets checked={len(secrets)} files={len(files)}")


# -- loopback unless configured otherwise ---------------------------------------------------


def outward_address() -> str | None:
    """This machine's address on its default route (no packet is sent), if it has one
    that is not loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address: str = sock.getsockname()[0]
    return None if address.startswith("127.") else address


async def reachable(host: str, port: int) -> bool:
    try:
        stream = await trio.open_tcp_stream(host, port)
    except OSError:
        return False
    await stream.aclose()
    return True


async def test_the_server_binds_loopback_unless_configured_otherwise() -> None:
    assert InterceptionServer().host == "127.0.0.1"
    assert EvalConfig("x").interception_host == "127.0.0.1"
    outward = outward_address()
    with trio.fail_after(LIMIT):
        async with open_interception_server(graceful_timeout=0.1) as server:
            assert server.url.startswith("http://127.0.0.1:")
            port = int(server.url.rsplit(":", 1)[1])
            assert await reachable("127.0.0.1", port)
            if outward is not None:
                assert not await reachable(outward, port)
        if outward is None:
            pytest.skip("no non-loopback address to check")
        async with open_interception_server(host="0.0.0.0", graceful_timeout=0.1) as server:
            port = int(server.url.rsplit(":", 1)[1])
            assert await reachable(outward, port)  # configured otherwise: it listens there
