"""Token-level training samples from traces.

Each recorded turn with token data (the server returned ``prompt_token_ids`` and the
completion's ``token_ids``; see ``taketurns._models.openai`` for the request options)
is one ``TurnTokens``. A trace's turns are merged into one ``Sample`` — one sequence,
``prompt_ids`` then ``completion_ids``, with ``completion_mask`` 1 over the model's own
tokens and 0 over what the conversation inserted between its turns (user messages,
tool results, template tokens) — as long as each turn's prompt extends the previous
turn's prompt + completion token for token. Where one does not (a harness rewrote the
history, a template re-rendered an earlier turn differently, a completion re-tokenized
differently, a turn came back without token ids) the sample ends there and a new one
starts, its ``reason`` saying why and its ``divergence`` (``_exchange.divergence``)
where: the position, the two token runs and the kind. A turn without token ids whose
client knows why (``Turn.token_gap``: a tool call llama-cpp-python's
``chatml-function-calling`` reports no ids for) has the why in that ``reason``.

What a trainer needs to trust each turn rides along, lined up with ``turns``:
``turn_finish_reasons`` (the endpoint's: ``stop``, ``length``, ``tool_calls``...),
``turn_truncated`` (cut at ``max_tokens``; ``truncated``: any turn of the sample
was), ``turn_stop_tokens`` (``sampled``: the token that ended the reply is the
turn's last completion token, mask 1, with its logprob; ``dropped``: the server
sampled it but did not return it, llama.cpp's: the turn's completion ends before it
and the next prompt's template tokens, it among them, stay mask 0; None: no stop
token ended the turn, or the server does not say). ``sampling`` is what the turns
were sent (temperature, top_p...: ``Turn.sampling``); a turn sent other sampling
starts a new sample. ``final_divergence``: the sample's last completion
re-tokenizes differently once rendered into a next prompt (``Turn.retokenized``);
the sampled ids are kept, as they are what was sampled. ``turn_token_gaps``: each
merged turn's ``Turn.token_gap`` (what its token data lacks, e.g. logprobs left out
because the server sampled under a grammar; None: nothing known missing).

Per-turn rewards (``Trace.record_turn_reward``) ride along for per-turn credit
assignment: ``Sample.turn_rewards[i]`` is the sum of the rewards paid on
``turns[i]`` (0.0 for a turn nothing paid) and ``turn_ends[i]`` the position in
``completion_ids`` just past that turn's own tokens (where a trainer puts the turn's
reward). ``reward`` stays the trace's.

Self-play: every seat's trace is its own agent's samples; ``episode_samples`` keeps the
traces of trainable agents only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from taketurns._eval.episode import Episode
from taketurns._exchange.divergence import Divergence, TokenSequence, retokenized
from taketurns._exchange.trace import Trace, Turn

__all__ = ["Sample", "TurnTokens", "episode_samples", "trace_samples", "turn_tokens"]


@attrs.frozen
class TurnTokens:
    """One turn's token data: ``completion_logprobs`` is None when the server sent
    none (or not one per completion token); the rest as on ``Turn``."""

    turn: int
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float] | None
    policy_version: str | None = None
    finish_reason: str | None = None
    stop_token: str | None = None
    sampling: dict[str, Any] | None = None
    retokenized: list[int] | None = None
    token_gap: str | None = None


@attrs.frozen
class Sample:
    """One training sequence of one agent's trace.

    ``prompt_ids + completion_ids`` is the whole sequence; ``completion_mask[i]`` is 1
    where ``completion_ids[i]`` is a token the model produced, 0 where the conversation
    inserted it; ``completion_logprobs`` holds the model's logprob at each masked-in
    position (0.0 elsewhere), or is None when a merged turn came without logprobs.
    ``turns`` are the trace's turn indices merged here; ``turn_ends`` and
    ``turn_rewards`` line up with them (module docstring). ``reason`` is None for a
    sample starting at the trace's first turn, else why the previous sample ended;
    ``divergence`` says where, when the reason is a prompt that does not extend the
    sequence before it. ``reward`` is the trace's; ``advantage`` is filled in by
    ``taketurns.train.group_advantages``. ``turn_finish_reasons``,
    ``turn_truncated``, ``turn_stop_tokens``, ``turn_token_gaps`` (per turn),
    ``truncated``, ``sampling`` and ``final_divergence``: module docstring."""

    episode_id: str
    agent: str
    task_idx: int
    rollout: int
    turns: tuple[int, ...]
    prompt_ids: list[int]
    completion_ids: list[int]
    completion_mask: list[int]
    completion_logprobs: list[float] | None
    reason: str | None = None
    reward: float = 0.0
    advantage: float | None = None
    policy_versions: tuple[str, ...] = ()
    divergence: Divergence | None = None
    turn_ends: tuple[int, ...] = ()
    turn_rewards: tuple[float, ...] = ()
    turn_finish_reasons: tuple[str | None, ...] = ()
    turn_truncated: tuple[bool, ...] = ()
    turn_stop_tokens: tuple[str | None, ...] = ()
    truncated: bool = False
    sampling: dict[str, Any] | None = None
    final_divergence: Divergence | None = None
    turn_token_gaps: tuple[str | None, ...] = ()

    @property
    def input_ids(self) -> list[int]:
        """The whole sequence: ``prompt_ids + completion_ids``."""
        return self.prompt_ids + self.completion_ids


def turn_tokens(turn: Turn) -> TurnTokens | None:
    """The turn's token data, or None when it has no response or no token ids."""
    if turn.response is None or turn.token_ids is None or turn.prompt_token_ids is None:
        return None
    logprobs = turn.logprobs
    if logprobs is not None and len(logprobs) != len(turn.token_ids):
        logprobs = None
    return TurnTokens(
        turn.index,
        turn.prompt_token_ids,
        turn.token_ids,
        logprobs,
        turn.policy_version,
        turn.finish_reason,
        turn.stop_token,
        turn.sampling,
        turn.retokenized,
        turn.token_gap,
    )


@attrs.define
class _Builder:
    """A sample being merged (mutable while its turns are appended)."""

    first: TurnTokens
    reason: str | None
    divergence: Divergence | None = None
    seq: TokenSequence = attrs.field(factory=TokenSequence)
    turns: list[int] = attrs.field(factory=list)
    completion: list[int] = attrs.field(factory=list)
    mask: list[int] = attrs.field(factory=list)
    logprobs: list[float] | None = attrs.field(factory=list)
    versions: list[str] = attrs.field(factory=list)
    ends: list[int] = attrs.field(factory=list)
    merged: list[TurnTokens] = attrs.field(factory=list)

    def add(self, tokens: TurnTokens, inserted: Sequence[int]) -> None:
        if self.turns:
            self.seq.extend(tokens.turn, tokens.prompt_ids, tokens.completion_ids)
        else:
            self.seq.start(tokens.turn, tokens.prompt_ids, tokens.completion_ids)
        self.turns.append(tokens.turn)
        self.merged.append(tokens)
        self.completion += inserted
        self.completion += tokens.completion_ids
        self.mask += [0] * len(inserted) + [1] * len(tokens.completion_ids)
        self.ends.append(len(self.completion))
        if self.logprobs is not None and tokens.completion_logprobs is not None:
            self.logprobs += [0.0] * len(inserted) + tokens.completion_logprobs
        else:
            self.logprobs = None
        version = tokens.policy_version
        if version is not None and version not in self.versions:
            self.versions.append(version)

    def sequence_length(self) -> int:
        return len(self.first.prompt_ids) + len(self.completion)

    def build(self, trace: Trace) -> Sample:
        info = trace.episode
        paid: dict[int, float] = {}
        for r in trace.turn_rewards:
            paid[r.turn] = paid.get(r.turn, 0.0) + r.value
        last = self.merged[-1]
        cut = tuple(t.finish_reason == "length" for t in self.merged)
        start = len(self.first.prompt_ids) + self.ends[-1] - len(last.completion_ids)
        return Sample(
            info.id,
            trace.agent.name,
            info.task_idx,
            info.rollout,
            tuple(self.turns),
            list(self.first.prompt_ids),
            self.completion,
            self.mask,
            self.logprobs,
            self.reason,
            trace.reward,
            None,
            tuple(self.versions),
            self.divergence,
            tuple(self.ends),
            tuple(paid.get(turn, 0.0) for turn in self.turns),
            tuple(t.finish_reason for t in self.merged),
            cut,
            tuple(t.stop_token for t in self.merged),
            any(cut),
            self.first.sampling,
            retokenized(last.turn, start, last.completion_ids, last.retokenized),
            tuple(t.token_gap for t in self.merged),
        )


def trace_samples(trace: Trace) -> list[Sample]:
    """``trace``'s turns merged into samples, split where a prompt does not extend the
    sequence so far or a turn lacks token data (see the module docstring). A trace
    with no token data at all gives no sample."""
    samples: list[Sample] = []
    current: _Builder | None = None
    reason: str | None = None
    divergence: Divergence | None = None
    for turn in trace.turns:
        tokens = turn_tokens(turn)
        if tokens is None:
            if current is not None:
                samples.append(current.build(trace))
                current = None
            what = "failed" if turn.response is None else "came without token ids"
            if turn.response is not None and turn.token_gap is not None:
                what += f" ({turn.token_gap})"
            reason, divergence = f"turn {turn.index} {what}", None
            continue
        if current is not None:
            divergence = current.seq.divergence(tokens.turn, tokens.prompt_ids)
            resampled = tokens.sampling != current.first.sampling
            if divergence is None and not resampled:
                current.add(tokens, tokens.prompt_ids[current.sequence_length() :])
                continue
            samples.append(current.build(trace))
            if divergence is not None:
                reason = divergence.describe()
            else:
                reason = (
                    f"turn {tokens.turn} was sent other sampling ({tokens.sampling}) than "
                    f"turn {current.first.turn} ({current.first.sampling})"
                )
        current = _Builder(tokens, reason, divergence)
        current.add(tokens, ())
    if current is not None:
        samples.append(current.build(trace))
    return samples


def episode_samples(episode: Episode) -> list[Sample]:
    """The samples of every trainable agent's trace of ``episode``, in trace order."""
    return [s for t in episode.traces if t.agent.trainable for s in trace_samples(t)]
