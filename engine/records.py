"""The JSONL episode record: one episode a line, written as each finishes.

``record`` is the private cattrs converter for this format; messages are written in
OpenAI wire shape so a trainer can feed them straight back to a tokenizer's chat
template. ``dumps_episode`` / ``loads_episode`` are the two calls the rest of the
engine makes; ``read_episodes`` tolerates a torn last line (a crash mid-write).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from engine.episode import Episode
from engine.messages import Message
from engine.task import Task
from engine.trace import Trace, Usage
from engine.wire import from_wire, register_messages, to_wire

__all__ = ["dumps_episode", "loads_episode", "read_episodes", "record"]

record = cattrs.Converter(omit_if_default=False)
register_messages(record)


def _task_out(task: Task) -> dict[str, Any]:
    prompt: Any = task.prompt
    if prompt is not None and not isinstance(prompt, str):
        prompt = [to_wire(m) for m in prompt]
    return {
        "idx": task.idx,
        "name": task.name,
        "prompt": prompt,
        "system_prompt": task.system_prompt,
        "answer": task.answer,
        "info": task.info,
    }


def _task_in(raw: dict[str, Any], _: Any) -> Task:
    prompt = raw.get("prompt")
    if isinstance(prompt, list):
        prompt = tuple(from_wire(m, f"task.prompt[{i}]") for i, m in enumerate(prompt))
    return Task(
        idx=raw["idx"],
        name=raw.get("name", ""),
        prompt=prompt,
        system_prompt=raw.get("system_prompt"),
        answer=raw.get("answer"),
        info=raw.get("info") or {},
    )


def _usage_out(usage: Usage) -> dict[str, int]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


record.register_unstructure_hook(Task, _task_out)
record.register_structure_hook(Task, _task_in)
record.register_unstructure_hook(Usage, _usage_out)
record.register_structure_hook(
    Usage, lambda raw, _: Usage(raw.get("prompt_tokens", 0), raw.get("completion_tokens", 0))
)
record.register_structure_hook(Message, lambda raw, _: from_wire(raw))
record.register_unstructure_hook(
    Trace,
    make_dict_unstructure_fn(Trace, record, state=override(omit=True)),
)
record.register_structure_hook(
    Trace,
    make_dict_structure_fn(Trace, record, state=override(omit=True)),
)


def dumps_episode(episode: Episode) -> str:
    """One JSON line (no trailing newline). Values that are not JSON become strings."""
    return json.dumps(record.unstructure(episode), default=str, separators=(",", ":"))


def loads_episode(line: str) -> Episode:
    return record.structure(json.loads(line), Episode)


def read_episodes(path: Path) -> Iterator[dict[str, Any]]:
    """The raw episode objects in ``path``, skipping a torn (unparseable) last line."""
    with path.open(encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            if i >= len(lines) - 2:  # the last line, possibly followed by ""
                return
            raise
