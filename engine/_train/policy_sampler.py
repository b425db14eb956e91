"""One decoding step's sampling for a batch of rows, each with its own sampler.

``Sampler`` is a request's sampling fields as the live policy (``_train.policy``)
honours them: ``temperature`` (0: greedy), ``top_p``, ``top_k`` (0 or -1: off),
``min_p``, ``repetition_penalty`` (``repeat_penalty``, llama.cpp's name, too), ``seed``
and ``max_tokens``. ``sample`` turns a step's logits into one token per row and that
token's logprob under the distribution it was drawn from (the processed logits of the
same forward pass): at temperature 1 with no truncation that is the model's own
``log_softmax``, which a trainer's importance ratio recomputes.

Imports torch: only ``taketurns._train.policy`` imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import torch

__all__ = ["Sampler", "process", "sample"]


@attrs.frozen
class Sampler:
    """The sampling of one request (module docstring). ``from_fields`` reads request
    fields; unknown fields are ignored (they are the endpoint's, e.g. ``logprobs``)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    seed: int | None = None
    max_tokens: int = 64
    stop: tuple[str, ...] = ()

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any], *, max_tokens: int) -> Sampler:
        penalty = fields.get("repetition_penalty", fields.get("repeat_penalty"))
        stop = fields.get("stop") or ()
        return cls(
            temperature=float(_or(fields.get("temperature"), 1.0)),
            top_p=float(_or(fields.get("top_p"), 1.0)),
            top_k=max(int(_or(fields.get("top_k"), 0)), 0),
            min_p=float(_or(fields.get("min_p"), 0.0)),
            repetition_penalty=float(_or(penalty, 1.0)),
            seed=None if fields.get("seed") is None else int(fields["seed"]),
            max_tokens=int(_or(fields.get("max_tokens"), max_tokens)),
            stop=(stop,) if isinstance(stop, str) else tuple(stop),
        )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def process(logits: torch.Tensor, sampler: Sampler, seen: torch.Tensor) -> torch.Tensor:
    """One row's log-probabilities to sample from: ``logits`` (vocabulary,) after the
    repetition penalty over the ids ``seen`` (prompt and completion so far), the
    temperature and the top-k, top-p and min-p cuts (cut tokens get -inf)."""
    logits = logits.float()
    if sampler.repetition_penalty != 1.0 and seen.numel():
        picked = logits[seen]
        penalised = torch.where(
            picked > 0, picked / sampler.repetition_penalty, picked * sampler.repetition_penalty
        )
        logits = logits.scatter(0, seen, penalised)
    if not sampler.greedy and sampler.temperature != 1.0:
        logits = logits / sampler.temperature
    if sampler.top_k > 0 and sampler.top_k < logits.numel():
        kth = torch.topk(logits, sampler.top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    logprobs = torch.log_softmax(logits, dim=-1)
    if sampler.min_p > 0.0:
        floor = logprobs.max() + torch.log(torch.tensor(sampler.min_p))
        logprobs = logprobs.masked_fill(logprobs < floor, float("-inf"))
    if sampler.top_p < 1.0:
        ordered, order = torch.sort(logprobs, descending=True)
        before = torch.cumsum(ordered.exp(), dim=-1) - ordered.exp()  # mass ahead of each
        cut = torch.zeros_like(logprobs, dtype=torch.bool)
        cut[order] = before >= sampler.top_p  # always keeps the most likely token
        logprobs = logprobs.masked_fill(cut, float("-inf"))
    if sampler.min_p > 0.0 or sampler.top_p < 1.0:
        logprobs = torch.log_softmax(logprobs, dim=-1)  # renormalised over what is kept
    return logprobs


def sample(
    logits: torch.Tensor,
    samplers: Sequence[Sampler],
    generators: Sequence[torch.Generator | None],
    seen: Sequence[torch.Tensor],
) -> tuple[list[int], list[float]]:
    """One token per row of ``logits`` (rows, vocabulary) and its logprob under the
    distribution it was drawn from (``process``); greedy rows take the argmax and
    report its logprob at temperature 1."""
    ids: list[int] = []
    lps: list[float] = []
    for row, sampler in enumerate(samplers):
        logprobs = process(logits[row], sampler, seen[row])
        if sampler.greedy:
            token = int(torch.argmax(logprobs))
        else:
            token = int(torch.multinomial(logprobs.exp(), 1, generator=generators[row]))
        ids.append(token)
        lps.append(float(logprobs[token]))
    return ids, lps
