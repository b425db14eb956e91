"""One seed drives everything (issue 26, item 1): the same config run twice, at ``-c 1``
and ``-c 64``, on the local and process backends (Ray: tests/test_ray_backend.py),
writes the same records but for ids and timing; every model call carries a ``seed``
that is the same in both runs and distinct across calls; another ``--seed`` deals and
chooses otherwise; an endpoint that refuses ``seed`` is called without it, noted once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio
from httpservers import serve_app
from quart import Response, request
from quart_trio import QuartTrio
from rundirs import eval_cli
from sameruns import assert_same_runs, runs, turn_seeds

from taketurns import EvalConfig, RunDir, run_eval
from taketurns._config.settings import load_eval_config
from taketurns._eval.plan import env_class
from taketurns._exchange.seeds import CallSeeds, call_seed, derive, episode_seed, session_seed
from taketurns._models.builtin import BuiltinModel
from taketurns._models.model import ModelRequest
from taketurns._models.wire import from_wire, to_wire
from taketurns.envs.kuhn import KuhnConfig

# --- the derivation ------------------------------------------------------------------------


def test_seeds_are_stable_hashes() -> None:
    # fixed values: a seed is the same on every machine, Python version and run
    assert derive("episode", 0, 0, 0) == episode_seed(0, 0, 0) == 4894448360197743277
    assert (
        session_seed(1, "player0", 0) == derive("session", 1, "player0", 0) == 4968664834223497596
    )
    assert call_seed(1, 0) == 1931723693
    assert episode_seed(0, 1, 0) != episode_seed(0, 0, 1) != episode_seed(1, 0, 0)
    assert all(0 <= call_seed(s, i) < 2**31 for s in range(20) for i in range(20))
    seeds = CallSeeds(77)  # what a session's boundary sends, call by call
    assert [seeds.next() for _ in range(12)] == [call_seed(77, i) for i in range(12)]


def test_the_seed_is_an_eval_option_refused_when_bad(tmp_path: Path) -> None:
    assert EvalConfig(env_id="kuhn-poker").seed == 0  # every run is reproducible
    assert eval_cli("kuhn-poker", "-n", "1", "--seed", "-3", "-o", str(tmp_path / "a")) == 2
    assert eval_cli("kuhn-poker", "-n", "1", "--seed", "2", "-o", str(tmp_path / "b")) == 0
    assert "seed = 2" in (tmp_path / "b" / "config.toml").read_text()
    assert json.loads((tmp_path / "b" / "summary.json").read_text())["seed"] == 2


def test_the_seed_flag_is_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        eval_cli("--help")
    out = " ".join(capsys.readouterr().out.split())
    assert "--seed S the run's seed: the tasks, each episode's RNG," in out
    assert "derive from it (default: 0)" in out


# --- the same config twice: identical records but for ids and timing -----------------------


def test_kuhn_replays_at_any_concurrency_and_backend(tmp_path: Path) -> None:
    base = ["kuhn-poker", "-n", "40", "-r", "2", "--seed", "11"]
    one, many, procs = tmp_path / "c1", tmp_path / "c64", tmp_path / "procs"
    assert eval_cli(*base, "-c", "1", "-o", str(one)) == 0
    assert eval_cli(*base, "-c", "64", "-o", str(many)) == 0
    assert (
        eval_cli(*base, "-c", "64", "--backend", "processes", "--workers", "2", "-o", str(procs))
        == 0
    )
    assert_same_runs(one, many, 80)
    assert_same_runs(one, procs, 80)
    seeds = turn_seeds(one)
    assert None not in seeds
    assert len(set(seeds)) == len(seeds)  # distinct across turns, seats and episodes


def test_user_sim_replays_at_any_concurrency_and_backend(tmp_path: Path) -> None:
    data = tmp_path / "qa.jsonl"
    rows = [{"prompt": f"You want [tea] or [coffee] #{i}.", "answer": "tea"} for i in range(6)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    base = ["user-sim", "--env.taskset=jsonl", f"--env.taskset.path={data}", "-n", "6", "-r", "3"]
    one, many, procs = tmp_path / "c1", tmp_path / "c64", tmp_path / "procs"
    assert eval_cli(*base, "-c", "1", "-o", str(one)) == 0
    assert eval_cli(*base, "-c", "64", "-o", str(many)) == 0
    assert (
        eval_cli(*base, "-c", "64", "--backend", "processes", "--workers", "2", "-o", str(procs))
        == 0
    )
    assert_same_runs(one, many, 18)
    assert_same_runs(one, procs, 18)
    seeds = turn_seeds(one)
    assert len(set(seeds)) == len(seeds) > 18


def test_the_envs_rng_is_the_episodes(tmp_path: Path) -> None:
    base = ["rngenv:RngEnv", "-n", "30", "-r", "2"]
    one, procs, other = tmp_path / "c1", tmp_path / "procs", tmp_path / "other"
    assert eval_cli(*base, "-c", "1", "-o", str(one)) == 0
    assert (
        eval_cli(*base, "-c", "64", "--backend", "processes", "--workers", "2", "-o", str(procs))
        == 0
    )
    assert eval_cli(*base, "--seed", "5", "-o", str(other)) == 0
    assert_same_runs(one, procs, 60)
    a, b = runs(one), runs(other)
    for (idx, rollout), episode in a.items():
        [trace] = episode["traces"]
        assert trace["info"]["episode_seed"] == episode["seed"] == episode_seed(0, idx, rollout)
    offered = [e["traces"][0]["info"]["offered"] for e in a.values()]
    assert len({tuple(o) for o in offered}) > 10  # the episodes draw differently
    assert offered != [b[key]["traces"][0]["info"]["offered"] for key in a]


def test_another_seed_deals_and_chooses_otherwise(tmp_path: Path) -> None:
    base = ["kuhn-poker", "-n", "40", "-r", "2"]
    a, b, pinned = tmp_path / "a", tmp_path / "b", tmp_path / "pinned"
    assert eval_cli(*base, "-o", str(a)) == 0
    assert eval_cli(*base, "--seed", "1", "-o", str(b)) == 0
    assert eval_cli(*base, "--seed", "1", "--env.seed=0", "-o", str(pinned)) == 0
    ra, rb, rp = runs(a), runs(b), runs(pinned)
    deals = {key: e["task"]["info"]["seed"] for key, e in ra.items()}
    assert sum(deals[key] != e["task"]["info"]["seed"] for key, e in rb.items()) == 80
    # the env's own seed pins the deals; the episodes and the model calls follow --seed
    assert {key: e["task"] for key, e in rp.items()} == {key: e["task"] for key, e in ra.items()}
    assert all(rp[key]["seed"] != e["seed"] for key, e in ra.items())
    assert set(turn_seeds(a)).isdisjoint(turn_seeds(pinned))

    def answers(run: dict[Any, dict[str, Any]]) -> list[Any]:
        return [t["messages"] for key in sorted(run) for t in run[key]["traces"]]

    assert answers(rp) != answers(ra)  # same deals, other choices of the built-in model


# --- a real endpoint: the seed on the wire ------------------------------------------------


def recording_app(
    seen: list[dict[str, Any]], *, refuse_seed: bool = False, policy: str = "bracket"
) -> QuartTrio:
    """A chat-completions endpoint that records every request body and answers as the
    built-in ``policy`` would with the request's seed (or refuses ``seed`` with a 400
    naming it, as OpenAI-compatible servers that lack it do)."""
    app = QuartTrio(__name__)
    model = BuiltinModel(policy)

    @app.post("/v1/chat/completions")
    async def chat() -> Response:
        body = json.loads(await request.get_data(as_text=False))
        seen.append(body)
        if refuse_seed and "seed" in body:
            error = {"message": "Unrecognized request argument supplied: seed"}
            return Response(json.dumps({"error": error}), status=400, mimetype="application/json")
        messages = tuple(from_wire(m, "messages") for m in body["messages"])
        sampling = {"seed": body["seed"]} if "seed" in body else {}
        answer = model.respond(ModelRequest(body["model"], messages, (), sampling))
        reply = {
            "model": body["model"],
            "choices": [{"message": to_wire(answer.message), "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1},
        }
        return Response(json.dumps(reply), mimetype="application/json")

    return app


async def _eval(url: str, out: Path, **options: Any) -> dict[str, Any]:
    config = EvalConfig(
        env_id="kuhn-poker", model="m", base_url=url, output_dir=str(out), **options
    )
    run_dir = RunDir(out)
    run_dir.prepare(resume=False, overwrite=False)
    with trio.fail_after(120):
        run = await run_eval(config, run_dir, progress=False, report=False)
    return run.summary


def _by_conversation(bodies: list[dict[str, Any]]) -> Counter[tuple[str, Any]]:
    return Counter((json.dumps(b["messages"], sort_keys=True), b.get("seed")) for b in bodies)


async def test_every_call_carries_a_seed_the_same_in_both_runs(tmp_path: Path) -> None:
    first: list[dict[str, Any]] = []
    second: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        url1 = await nursery.start(serve_app, recording_app(first))
        url2 = await nursery.start(serve_app, recording_app(second))
        opts = {"num_tasks": 12, "rollouts": 2, "seed": 3}
        await _eval(f"{url1}/v1", tmp_path / "c1", concurrency=1, **opts)
        await _eval(f"{url2}/v1", tmp_path / "c64", concurrency=64, **opts)
        nursery.cancel_scope.cancel()
    calls = [b for b in first if b.get("max_tokens") != 1]  # not the preflight
    assert len(calls) >= 48
    assert all("seed" in b for b in calls)
    seeds = [b["seed"] for b in calls]
    assert len(set(seeds)) == len(seeds)  # distinct across turns, seats and episodes
    assert _by_conversation(first) == _by_conversation(second)  # same call, same seed
    assert_same_runs(tmp_path / "c1", tmp_path / "c64", 24)
    recorded = sorted(s for s in turn_seeds(tmp_path / "c1") if s is not None)
    assert recorded == sorted(seeds)  # each turn records the seed it was sent with


async def test_a_role_pins_its_seed(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_app, recording_app(seen))
        config = load_eval_config(
            KuhnConfig,
            file_data={"env_id": "kuhn-poker", "num_tasks": 4, "model": "m"},
            overrides=[("base_url", f"{url}/v1"), ("env.player0.sampling.seed", "42")],
        )
        run_dir = RunDir(tmp_path / "run")
        run_dir.prepare(resume=False, overwrite=False)
        with trio.fail_after(120):
            await run_eval(config, run_dir, progress=False, report=False)
        nursery.cancel_scope.cancel()
    p0 = [b["seed"] for b in seen if "You are player0" in json.dumps(b["messages"][:1])]
    p1 = [b["seed"] for b in seen if "You are player1" in json.dumps(b["messages"][:1])]
    assert p0
    assert set(p0) == {42}
    assert len(set(p1)) == len(p1) >= 4


async def test_an_endpoint_that_refuses_seed_is_called_without_it(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        url = await nursery.start(serve_app, recording_app(seen, refuse_seed=True))
        summary = await _eval(f"{url}/v1", tmp_path / "run", num_tasks=6, concurrency=1)
        nursery.cancel_scope.cancel()
    calls = [b for b in seen if b.get("max_tokens") != 1]  # not the preflight
    assert ["seed" in b for b in calls] == [True] + [False] * (len(calls) - 1)
    assert calls[0]["messages"] == calls[1]["messages"]  # sent again at once, without it
    [note] = summary["notes"]
    assert "refuses the 'seed' request field" in note
    assert url in note
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["notes"] == [note]
    assert summary["ok"] == summary["episodes"] == 6
    assert set(turn_seeds(tmp_path / "run")) == {None}  # no seed was sent


async def test_a_judges_calls_carry_seeds_that_follow_the_run(tmp_path: Path) -> None:
    qa = str(Path(__file__).parent.parent / "examples" / "qa.jsonl")
    bodies: dict[str, list[dict[str, Any]]] = {"c1": [], "c64": [], "other": []}
    async with trio.open_nursery() as nursery:
        for name, concurrency, seed in (("c1", 1, 0), ("c64", 64, 0), ("other", 64, 9)):
            url = await nursery.start(serve_app, recording_app(bodies[name], policy="judge"))
            config = load_eval_config(
                env_class("single-agent").config_class,
                file_data={"env_id": "single-agent", "num_tasks": 4, "rollouts": 2},
                overrides=[
                    ("env.taskset", "jsonl"),
                    ("concurrency", str(concurrency)),
                    ("seed", str(seed)),
                    ("env.taskset.path", qa),
                    ("env.taskset.judge.model", "judge"),
                    ("env.taskset.judge.base_url", f"{url}/v1"),
                ],
            )
            run_dir = RunDir(tmp_path / name)
            run_dir.prepare(resume=False, overwrite=False)
            with trio.fail_after(120):
                await run_eval(config, run_dir, progress=False, report=False)
        nursery.cancel_scope.cancel()
    judged = {
        name: [b for b in found if b.get("max_tokens") != 1] for name, found in bodies.items()
    }
    assert judged["c1"]
    assert all(isinstance(b["seed"], int) for b in judged["c1"])
    assert _by_conversation(judged["c1"]) == _by_conversation(judged["c64"])
    assert {b["seed"] for b in judged["c1"]}.isdisjoint(b["seed"] for b in judged["other"])


# --- a session's seed is the user's choice, never the opening order ------------------------


async def _first_seeds(order: list[int], keyed: bool) -> dict[str, int | None]:
    """Open one session per entry of ``order`` from concurrent tasks, the k-th of
    ``order`` opening k-th; the first call's seed of each, by what identifies it."""
    from taketurns import Agent, AgentConfig, Task
    from taketurns.env import EpisodeInfo

    base = Agent("user", AgentConfig(model="builtin/echo"))
    agent = base.bind(EpisodeInfo("e/0/0", "x", 0, seed=123))
    seeds: dict[str, int | None] = {}

    async def one(rank: int, n: int) -> None:
        await trio.sleep(rank)  # the autojump clock: a fixed, chosen opening order
        task = Task(0 if keyed else n, prompt=f"hello {n}")
        keys = {"seed_key": f"k{n}"} if keyed else {}
        async with agent.chat(task, **keys) as session:
            await session.turn()
            seeds[str(n)] = session.trace.turns[0].seed

    async with trio.open_nursery() as nursery:
        for rank, n in enumerate(order):
            nursery.start_soon(one, rank, n)
    return seeds


async def test_a_sessions_seed_does_not_depend_on_the_opening_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Sessions on different tasks (or with their own ``seed_key`` on one task)
    opened from concurrent tasks get the same seeds in any opening order."""
    for keyed in (False, True):
        forward = await _first_seeds([1, 2, 3, 4], keyed)
        backward = await _first_seeds([4, 3, 2, 1], keyed)
        assert forward == backward
        assert len(set(forward.values())) == 4
