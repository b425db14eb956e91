"""The process owner with real processes, when the supervisor itself does not finish:
SIGKILLed by someone else, or stopped so that ``aclose`` has to hard-kill it. On both
paths ``aclose`` leaves no process of the program's group alive. And the grace a
server gets: SIGTERM, time to exit, SIGKILL past it, none after ``kill``. Processes
are counted by a marker in their environment (``/proc/*/environ``)."""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import os
import signal
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from procs import children, marked

from taketurns._procs import owner, sandbox, scratch
from taketurns._procs.process import open_process
from taketurns._procs.sandbox import Sandbox

LIMIT = 30


@pytest.fixture
def mark() -> Iterator[str]:
    """A fresh marker; whatever carries it at teardown (a failed test's) is killed."""
    mark = uuid.uuid4().hex
    yield mark
    for pid in marked(f"TT_OWNER_MARK={mark}"):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


async def settled(mark: str, count: int, within: float = 10.0) -> list[int]:
    """``marked(mark)`` once it holds ``count`` processes (or ``within`` passed)."""
    with trio.move_on_after(within):
        while len(marked(mark)) != count:  # noqa: ASYNC110 - /proc sends no event
            await trio.sleep(0.02)
    return marked(mark)


def sleeping(mark: str) -> list[int]:
    """The marked processes that are ``sleep`` (exec'd: in their own session by now)."""
    found = []
    for pid in marked(f"TT_OWNER_MARK={mark}"):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                found.append(pid)
    return found


async def start_sleep(tmp_path: Path, mark: str) -> owner.OwnedProcess:
    """``sleep 300`` owned without a sandbox; returns once ``sleep`` runs."""
    env = {"PATH": os.environ["PATH"], "TT_OWNER_MARK": mark}
    owned = await owner.start(
        ["sleep", "300"], cwd=tmp_path, env=env, sandbox=Sandbox(kind="none"), scratch=tmp_path
    )
    with trio.move_on_after(10):
        while not sleeping(mark):  # noqa: ASYNC110 - /proc sends no event
            await trio.sleep(0.02)
    assert len(sleeping(mark)) == 1
    return owned


async def test_a_sigkilled_supervisor_leaves_no_program_after_aclose(
    tmp_path: Path, mark: str
) -> None:
    with trio.fail_after(LIMIT):
        owned = await start_sleep(tmp_path, mark)
        os.kill(owned.pid, signal.SIGKILL)  # someone else kills the supervisor
        await owned.wait()
        await owned.aclose()
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []


async def test_a_stuck_supervisor_is_hard_killed_with_its_program(
    tmp_path: Path, mark: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(owner, "KILL_S", 0.2)
    with trio.fail_after(LIMIT):
        owned = await start_sleep(tmp_path, mark)
        os.kill(owned.pid, signal.SIGSTOP)  # it cannot act on the cut lifeline
        await owned.aclose()  # past KILL_S: SIGKILL
        assert owned.process.returncode == -signal.SIGKILL
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []


async def test_a_sigkilled_bwrap_leaves_no_sandbox_after_aclose(tmp_path: Path, mark: str) -> None:
    """bwrap SIGKILLed by someone else, its namespace's init (the supervisor) stopped
    so that it cannot act on the cut lifeline: ``aclose`` kills the init itself."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {"PATH": os.environ["PATH"], "TT_OWNER_MARK": mark}
    with trio.fail_after(LIMIT):
        owned = await owner.start(
            ["sleep", "300"], cwd=scratch, env=env, sandbox=Sandbox(), scratch=scratch
        )
        while not sleeping(mark):  # noqa: ASYNC110 - /proc sends no event
            await trio.sleep(0.02)
        (init,) = children(owned.pid)  # bwrap's only child: the namespace's init
        os.kill(init[0], signal.SIGSTOP)
        os.kill(owned.pid, signal.SIGKILL)
        await owned.wait()
        await owned.aclose()
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []


def test_the_package_is_readable_when_it_lies_beside_the_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a checkout under the temp directory (CI clones there) shares its parent with
    # every rollout's scratch directory: the package is bound back all the same, while
    # a path on the command line into that parent (another rollout's scratch) is not
    import subprocess

    from taketurns._procs import sandbox

    package = tmp_path / "checkout" / "engine"
    package.mkdir(parents=True)
    (package / "marker.txt").write_text("the package\n")
    other = tmp_path / "taketurns-other"
    other.mkdir()
    (other / "card.txt").write_text("K")
    scratch = tmp_path / "taketurns-mine"
    scratch.mkdir()
    monkeypatch.setattr(sandbox, "_package_dirs", lambda: [str(package)])
    script = f"cat {package}/marker.txt; cat {other}/card.txt || echo hidden"
    program = ["/bin/sh", "-c", script, str(other / "card.txt")]
    argv = sandbox.bwrap_argv(
        program,
        program=program,
        scratch=scratch,
        cwd=scratch,
        sandbox=Sandbox(hide=(str(tmp_path),)),
        model_socket=None,
    )
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert run.stdout.split() == ["the", "package", "hidden"], run.stderr


def test_a_program_in_a_user_folder_is_bound_alone(tmp_path: Path) -> None:
    # a script in a project folder (no bin/, no node_modules) is the agent's program:
    # it runs, and its folder (the project's .env beside it) and that folder's parent
    # stay out of the sandbox
    import subprocess

    from taketurns._procs import sandbox

    proj = tmp_path / "home" / "proj"
    proj.mkdir(parents=True)
    (proj / ".env").write_text("OPENAI_API_KEY=sk-canary\n")
    (tmp_path / "home" / "notes.txt").write_text("the home\n")
    agent = proj / "agent.sh"
    agent.write_text(
        "#!/bin/sh\necho running\ncat " + str(proj / ".env") + " || echo hidden\n"
        "cat " + str(tmp_path / "home" / "notes.txt") + " || echo hidden\n"
    )
    agent.chmod(0o755)
    scratch = tmp_path / "tmp" / "taketurns-mine"  # every scratch's folder: never bound
    scratch.mkdir(parents=True)
    program = [str(agent)]
    argv = sandbox.bwrap_argv(
        program, program=program, scratch=scratch, cwd=scratch, sandbox=Sandbox(),
        model_socket=None,
    )  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert run.stdout.split() == ["running", "hidden", "hidden"], run.stderr


async def start_shell(tmp_path: Path, mark: str, script: str, grace_s: float) -> owner.OwnedProcess:
    """``sh -c script`` owned with ``grace_s``, without a sandbox; returns once it has
    written ``ready`` to ``tmp_path / "log"``."""
    env = {"PATH": os.environ["PATH"], "TT_OWNER_MARK": mark}
    log = tmp_path / "log"
    program = ["sh", "-c", f"{script.replace('LOG', str(log))}"]
    owned = await owner.start(
        program, cwd=tmp_path, env=env, sandbox=Sandbox(kind="none"), scratch=tmp_path,
        grace_s=grace_s,
    )  # fmt: skip
    while not log.exists() or "ready" not in log.read_text():  # noqa: ASYNC110 - a file
        await trio.sleep(0.02)
    return owned


# stops cleanly on SIGTERM: writes that it did, then exits 0 (its sleep gets it too)
CLEAN = 'trap "echo stopped cleanly >> LOG; exit 0" TERM; echo ready >> LOG; sleep 300 & wait'
# ignores SIGTERM (an ignored signal stays ignored across exec)
DEAF = 'trap "" TERM; echo ready >> LOG; exec sleep 300'


async def test_a_grace_lets_the_program_exit_on_sigterm(tmp_path: Path, mark: str) -> None:
    with trio.fail_after(LIMIT):
        owned = await start_shell(tmp_path, mark, CLEAN, grace_s=LIMIT)
        await owned.aclose()
        assert await owned.wait() == 0
        assert (tmp_path / "log").read_text().split("\n")[1] == "stopped cleanly"
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []


async def test_a_program_deaf_to_sigterm_is_killed_after_the_grace(
    tmp_path: Path, mark: str
) -> None:
    with trio.fail_after(LIMIT):
        owned = await start_shell(tmp_path, mark, DEAF, grace_s=1.0)
        start = trio.current_time()
        await owned.aclose()
        assert trio.current_time() - start >= 1.0
        assert await owned.wait() == 128 + signal.SIGKILL
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []


async def test_kill_skips_the_grace(tmp_path: Path, mark: str) -> None:
    with trio.fail_after(LIMIT):
        owned = await start_shell(tmp_path, mark, DEAF, grace_s=2 * LIMIT)
        owned.kill()
        await owned.aclose()
        assert await owned.wait() == 128 + signal.SIGKILL
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []


# a setsid child and a double-forked daemon (both out of the program's group), then a
# hang deaf to SIGTERM
DETACHED = (
    "setsid sleep 301 & (setsid sh -c 'sleep 302 & exit 0' &); "
    'trap "" TERM; echo ready >> LOG; exec sleep 300'
)


async def test_kill_kills_setsid_descendants_without_a_sandbox(tmp_path: Path, mark: str) -> None:
    """``kill`` SIGKILLs the supervisor, which would leave the members that left the
    program's group (and so its status-pipe kill) without a subreaper: they die too."""
    with trio.fail_after(LIMIT):
        owned = await start_shell(tmp_path, mark, DETACHED, grace_s=2 * LIMIT)
        while len(sleeping(mark)) < 3:  # noqa: ASYNC110 - /proc sends no event
            await trio.sleep(0.02)
        owned.kill()
        await owned.aclose()
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []


async def test_a_grace_also_holds_when_the_engine_dies(tmp_path: Path, mark: str) -> None:
    """The lifeline cut by the engine's exit (here: closed by hand, as the kernel
    does for a SIGKILLed engine) stops the program as ``aclose`` does: SIGTERM first."""
    with trio.fail_after(LIMIT):
        owned = await start_shell(tmp_path, mark, CLEAN, grace_s=LIMIT)
        owned.cut()
        assert await owned.wait() == 0
        assert "stopped cleanly" in (tmp_path / "log").read_text()
        await owned.aclose()
        assert await settled(f"TT_OWNER_MARK={mark}", 0) == []


async def test_run_starts_as_start_does_and_captures_the_output(tmp_path: Path) -> None:
    """``run`` takes ``start``'s options (here: the directory, the exact environment
    and a grace) and returns the program's status and what it wrote."""
    script = 'echo "$TT_VALUE in $(pwd)"; echo oops >&2; exit 3'
    env = {"PATH": os.environ["PATH"], "TT_VALUE": "given"}
    with trio.fail_after(LIMIT):
        done = await owner.run(
            ["sh", "-c", script],
            cwd=tmp_path,
            env=env,
            sandbox=Sandbox(kind="none"),
            scratch=tmp_path,
            grace_s=1.0,
        )
    assert done == owner.Captured(3, f"given in {tmp_path}\n".encode(), b"oops\n")


@pytest.mark.parametrize("kind", ["none", "bwrap"])
async def test_run_captures_output_past_a_chunk_whoever_holds_it_after(
    tmp_path: Path, kind: str, mark: str
) -> None:
    """Output larger than one read (here 300 kB on stdout, 70 kB on stderr) comes back
    whole and in order; a descendant that still holds both streams when the program
    exits neither holds ``run`` open nor outlives it (it is killed with the tree)."""
    script = (
        "import os, subprocess, sys\n"
        "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
        "sys.stdout.write(''.join(f'{i:07d}\\n' for i in range(37500)))\n"
        "sys.stderr.write('e' * 70000)\n"
    )
    env = {"PATH": os.environ["PATH"], "TT_OWNER_MARK": mark}
    with trio.fail_after(LIMIT):
        done = await owner.run(
            [sys.executable, "-c", script],
            cwd=tmp_path,
            env=env,
            sandbox=Sandbox(kind),
            scratch=tmp_path,
        )
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout == "".join(f"{i:07d}\n" for i in range(37500)).encode()
    assert done.stderr == b"e" * 70000
    assert await settled(mark, 0) == []


async def test_a_start_cancelled_before_it_begins_starts_nothing(tmp_path: Path, mark: str) -> None:
    """``start`` is a checkpoint before the process starts: cancelled there it raises
    ``Cancelled`` and no process exists (nothing to own, nothing leaked)."""
    env = {"PATH": os.environ["PATH"], "TT_OWNER_MARK": mark}
    with trio.CancelScope() as scope:
        scope.cancel()
        await owner.start(
            ["sleep", "300"], cwd=tmp_path, env=env, sandbox=Sandbox(kind="none"), scratch=tmp_path
        )
    assert scope.cancelled_caught
    assert marked(f"TT_OWNER_MARK={mark}") == []


async def test_waits_on_one_process_take_turns_and_all_see_its_status(
    tmp_path: Path,
) -> None:
    """Several tasks waiting on one process (its pidfd takes one waiter at a time) all
    get its status once it exits; ``poll`` after that reaps nothing twice."""
    process = await open_process(["sh", "-c", "sleep 0.2; exit 7"], cwd=tmp_path)
    codes: list[int] = []

    async def waiter() -> None:
        codes.append(await process.wait())

    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(waiter)
    assert codes == [7, 7, 7]
    assert process.poll() == 7
    assert process.returncode == 7


async def test_a_wait_is_a_checkpoint_before_and_after_the_exit(tmp_path: Path) -> None:
    """``Process.wait`` is a checkpoint whether the child still runs or was reaped
    already: it yields, and in a cancelled scope it raises ``Cancelled`` (the lock it
    takes is the checkpoint of a child reaped already)."""
    process = await open_process(["sh", "-c", "exit 3"], cwd=tmp_path)
    with trio.fail_after(LIMIT), trio.testing.assert_checkpoints():
        assert await process.wait() == 3
    with trio.testing.assert_checkpoints():
        assert await process.wait() == 3
    with trio.CancelScope() as scope:
        scope.cancel()
        await process.wait()
    assert scope.cancelled_caught


@pytest.mark.parametrize("kind", ["none", "bwrap"])
async def test_the_program_starts_with_the_standard_streams_and_default_signals(
    tmp_path: Path, kind: str
) -> None:
    """The supervisor forks the program itself: the program gets only descriptors
    0-2 (never the lifeline, status or report pipes), leads its own session, and
    does not inherit the signals Python ignores (SIGPIPE, SIGXFSZ)."""
    script = "ls /proc/$$/fd; echo $$; ps -o sid= -p $$; grep SigIgn /proc/self/status"
    env = {"PATH": os.environ["PATH"]}
    with trio.fail_after(LIMIT):
        done = await owner.run(
            ["sh", "-c", script], cwd=tmp_path, env=env, sandbox=Sandbox(kind), scratch=tmp_path
        )
    assert done.returncode == 0, done.stderr
    *fds, pid, sid, ignored = done.stdout.decode().splitlines()
    assert fds == ["0", "1", "2"]
    assert pid == sid.strip()  # a session of its own
    mask = int(ignored.split()[1], 16)
    assert not mask & (1 << (signal.SIGPIPE - 1))
    assert not mask & (1 << (signal.SIGXFSZ - 1))


async def test_a_program_that_cannot_start_is_status_127(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"]}
    with trio.fail_after(LIMIT):
        done = await owner.run(
            ["no-such-program-xyz"],
            cwd=tmp_path,
            env=env,
            sandbox=Sandbox("none"),
            scratch=tmp_path,
        )
    assert done.returncode == 127
    assert b"cannot start 'no-such-program-xyz'" in done.stderr
    assert b"No such file or directory" in done.stderr


def _copy_supervisor(tmp_path: Path) -> str:
    source = tmp_path / "pkg" / "supervisor.py"
    source.parent.mkdir()
    source.write_bytes(Path(owner.SUPERVISOR).read_bytes())
    return str(source)


def test_the_supervisor_runs_compiled_and_recompiled_when_stale(tmp_path: Path) -> None:
    """Its compiled form is written beside it, whatever PYTHONPYCACHEPREFIX says (a
    sandbox binds the package's folder), and written again once the source changed."""
    source = _copy_supervisor(tmp_path)
    compiled = owner.runnable.__wrapped__(source)
    assert Path(compiled).parent == tmp_path / "pkg" / "__pycache__"
    assert compiled.endswith(".pyc")
    first = Path(compiled).read_bytes()
    with open(source, "a") as f:
        f.write("\n# edited\n")
    os.utime(source, (1, 1))  # an mtime the old header cannot hold
    assert owner.runnable.__wrapped__(source) == compiled
    assert Path(compiled).read_bytes() != first


def test_the_supervisor_runs_from_source_when_its_compiled_form_is_private(
    tmp_path: Path,
) -> None:
    """A compiled form a sandbox's uid could not read (a private umask), or one that
    cannot be written, is passed over for the source."""
    source = _copy_supervisor(tmp_path)
    cache = tmp_path / "pkg" / "__pycache__"
    cache.mkdir(mode=0o700)
    cache.chmod(0o700)
    assert owner.runnable.__wrapped__(source) == source
    cache.chmod(0o755)
    assert owner.runnable.__wrapped__(source).endswith(".pyc")
    for path in cache.iterdir():
        path.unlink()
    cache.rmdir()
    cache.write_text("not a folder")  # nothing can be written there, root or not
    assert owner.runnable.__wrapped__(source) == source


async def test_a_program_started_through_the_compiled_supervisor_runs(tmp_path: Path) -> None:
    """What the engine runs is the compiled supervisor, and it supervises as the script
    does (both kinds)."""
    assert owner._supervisor("parent")[3].endswith(".pyc")
    for kind in ("none", "bwrap"):
        done = await owner.run(
            ["sh", "-c", "echo $0", "ran"],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin"},
            sandbox=Sandbox(kind),
            scratch=tmp_path,
        )
        assert (done.returncode, done.stdout) == (0, b"ran\n"), done


def test_a_failed_libc_call_in_the_supervisor_names_its_errno() -> None:
    """The supervisor calls libc through ``_ctypes`` (no ``ctypes`` import at
    start-up); a call that fails is an ``OSError`` with the call's own errno."""
    spec = importlib.util.spec_from_file_location("_supervisor_under_test", owner.SUPERVISOR)
    assert spec is not None
    assert spec.loader is not None
    supervisor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(supervisor)
    supervisor._libc("prctl", supervisor.PR_SET_DUMPABLE, 1, 0, 0, 0)  # succeeds: no error
    with pytest.raises(OSError, match="prctl") as failed:
        supervisor._libc("prctl", 0x7FFF, 0, 0, 0, 0)  # no such option
    assert failed.value.errno == errno.EINVAL


def test_the_kernels_real_path_is_realpaths(tmp_path: Path) -> None:
    """``real_path`` (the kernel's answer for a path that exists) agrees with
    ``os.path.realpath`` through link chains, ``..`` after a link, a dangling link
    and a missing path; ``existing_real_path`` says None for the last two."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "l").symlink_to(tmp_path / "a")
    (tmp_path / "l2").symlink_to("l/b")  # relative, through another link
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    present = [tmp_path / "a" / "b", tmp_path / "l", tmp_path / "l2", tmp_path / "l2" / ".."]
    for path in present:
        assert sandbox.real_path(path) == os.path.realpath(path)
        assert sandbox.existing_real_path(path) == os.path.realpath(path)
    assert sandbox.real_path(tmp_path / "l2") == str(tmp_path / "a" / "b")
    for path in [tmp_path / "dangling", tmp_path / "l" / "missing" / "x"]:
        assert sandbox.real_path(path) == os.path.realpath(path)
        assert sandbox.existing_real_path(path) is None


def test_a_readable_path_inside_one_bound_is_not_bound_again(tmp_path: Path) -> None:
    """Of ``x``, ``x-y`` and ``x/z`` (sorted, ``x-y`` lies between the other two),
    ``x`` and ``x-y`` are bound and ``x/z`` is not: it is inside ``x``."""
    for name in ("x", "x-y", "x/z"):
        (tmp_path / name).mkdir(parents=True, exist_ok=True)
    readable = tuple(str(tmp_path / n) for n in ("x/z", "x-y", "x"))
    own = tmp_path / "scratches" / "taketurns-own"
    own.mkdir(parents=True)
    resolved = sandbox.layout(
        Sandbox(readable=readable), "/bin/true", os.environ["PATH"], own.parent, None
    )
    binds = resolved.readable([])
    assert str(tmp_path / "x") in binds
    assert str(tmp_path / "x-y") in binds
    assert str(tmp_path / "x" / "z") not in binds


def test_a_kept_layout_gives_every_start_the_argv_it_would_get_alone(tmp_path: Path) -> None:
    """A ``Layout`` resolved for one start and kept (as a served harness keeps it)
    gives later starts of that program in other scratches of the same folder, with
    other file arguments, exactly the command line each would get resolving its own:
    a start's arguments and scratch are its own, never the first start's."""
    root = tmp_path / "scratches"
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.txt").write_text("a")
    (data / "b.txt").write_text("b")
    kept = None
    for n, name in enumerate(["a.txt", "b.txt"]):
        scratch = root / f"taketurns-{n}"
        scratch.mkdir(parents=True)
        program = ["/bin/cat", str(data / name), str(scratch / "prompt.json")]
        (scratch / "prompt.json").write_text("{}")
        options = {
            "program": program, "scratch": scratch, "cwd": scratch, "sandbox": Sandbox(),
            "model_socket": None, "search_path": os.environ["PATH"],
        }  # fmt: skip
        if kept is None:
            kept = sandbox.layout(Sandbox(), "/bin/cat", os.environ["PATH"], root, None)
        alone = sandbox.bwrap_argv(program, **options)
        assert sandbox.bwrap_argv(program, resolved=kept, **options) == alone
        options_end = alone.index("--")  # then the supervised command line
        ro = {alone[i + 1] for i in range(options_end) if alone[i] == "--ro-bind"}
        assert str(data / name) in ro  # the argument of this start, bound
        assert str(data / ["b.txt", "a.txt"][n]) not in ro  # the other start's, not
        assert ["--bind", str(scratch), str(scratch)] == alone[alone.index("--bind") :][:3]


def test_a_kept_layout_reads_what_no_bind_may_contain_at_every_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What no bind may contain (the homes, the cwd) is read at every start, not kept
    with the layout: a folder named on the command line is bound until ``HOME`` moves
    inside it, and no longer after, with the same kept layout."""
    data = tmp_path / "data"
    (data / "home").mkdir(parents=True)
    scratch = tmp_path / "scratches" / "taketurns-0"
    scratch.mkdir(parents=True)
    program = ["/bin/ls", str(data)]
    kept = sandbox.layout(Sandbox(), "/bin/ls", os.environ["PATH"], scratch.parent, None)

    def bound() -> set[str]:
        argv = sandbox.bwrap_argv(
            program, program=program, scratch=scratch, cwd=scratch, sandbox=Sandbox(),
            model_socket=None, resolved=kept,
        )  # fmt: skip
        end = argv.index("--")
        return {argv[i + 1] for i in range(end) if argv[i] == "--ro-bind"}

    assert str(data) in bound()
    monkeypatch.setenv("HOME", str(data / "home"))
    assert str(data) not in bound()


def test_scratch_files_are_never_reached_through_a_link_or_waited_on(tmp_path: Path) -> None:
    """In a scratch directory an agent wrote: ``create`` replaces a link (never writes
    through it), refuses a folder replaced by a link; ``read_bytes`` refuses a link and
    a FIFO (without waiting on it) and says None for nothing there."""
    root, victim = tmp_path / "scratch", tmp_path / "victim"
    (root / "home").mkdir(parents=True)
    victim.write_text("precious")
    (root / "prompt").symlink_to(victim)
    scratch.write_text(root, root / "prompt", "new")
    assert victim.read_text() == "precious"
    assert not (root / "prompt").is_symlink()
    assert scratch.read_bytes(root, root / "prompt") == b"new"
    (root / "away").symlink_to(tmp_path)  # a folder replaced by a link
    with pytest.raises(OSError, match=r"symbolic links|Not a directory"):
        scratch.write_text(root, root / "away" / "victim", "new")
    assert victim.read_text() == "precious"
    (root / "out").symlink_to(victim)
    with pytest.raises(OSError, match="symbolic links"):
        scratch.read_bytes(root, root / "out")
    os.mkfifo(root / "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        scratch.read_bytes(root, root / "fifo")
    assert scratch.read_bytes(root, root / "missing") is None
    assert scratch.read_bytes(root, root / "nowhere" / "missing") is None
    with pytest.raises(ValueError, match="not in the subpath"):
        scratch.write_text(root, tmp_path / "outside", "new")
    with pytest.raises(ValueError, match="climbs out"):
        scratch.write_text(root, root / "home" / ".." / ".." / "victim", "new")
    assert victim.read_text() == "precious"
