"""The reference programs (``taketurns.harnesses.programs``) start fast: run by path
with ``python -S`` they import the standard library alone, and their HTTP client
(``loop.Client``) keeps a connection alive between calls and makes a new one when the
server closed it while idle."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import threading

import pytest

from taketurns.harnesses import programs
from taketurns.harnesses.programs import loop


def _answer(listener: socket.socket, answers: int, closed: threading.Event) -> None:
    """Answer ``answers`` requests, each on a connection of its own, closing each
    once answered (as a server closes a kept-alive connection that went idle), and
    set ``closed`` after the first."""
    for n in range(answers):
        conn, _ = listener.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = re.search(rb"content-length: *(\d+)", head, re.IGNORECASE)
            assert length is not None
            while len(body) < int(length.group(1)):
                body += conn.recv(65536)
            payload = json.dumps({"n": n, "got": json.loads(body)}).encode()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
        closed.set()


def test_a_connection_the_server_closed_while_idle_is_made_anew() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        closed = threading.Event()
        server = threading.Thread(target=_answer, args=(listener, 2, closed), daemon=True)
        server.start()
        with loop.client() as http:
            first = http.post(f"http://127.0.0.1:{port}/v1/x", {"a": 1}, {})
            assert closed.wait(10)  # the server closed the kept-alive connection
            second = http.post(f"http://127.0.0.1:{port}/v1/x", {"a": 2}, {})
        server.join(10)
    assert (first.status, first.json()) == (200, {"n": 0, "got": {"a": 1}})
    assert (second.status, second.json()) == (200, {"n": 1, "got": {"a": 2}})


def test_no_answer_is_a_transport_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
    with loop.client() as http, pytest.raises(loop.TransportError):  # nobody listens
        http.post(f"http://127.0.0.1:{port}/v1/x", {}, {})


@pytest.mark.parametrize("name", ["chat", "stateful"])
def test_a_reference_program_imports_the_standard_library_alone(name: str) -> None:
    command = programs.command(name)
    assert command[1] == "-S"
    done = subprocess.run(
        [command[0], "-X", "importtime", *command[1:], "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "loop" in imported
    assert not {m for m in imported if m.split(".")[0] in ("taketurns", "httpx2", "site")}
