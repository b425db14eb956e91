"""The JSONL episode record: one episode a line, written as each finishes.

``record`` is the private cattrs converter for this format; messages are written in
OpenAI wire shape so a trainer can feed them straight back to a tokenizer's chat
template. ``dumps_episode`` / ``loads_episode`` are the two calls the rest of the
engine makes; ``read_episodes`` streams a file back, skipping damaged lines (a torn
last line from a crash mid-write, or anything else that is not a record).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cattrs
import orjson
from cattrs.gen import make_dict_structure_fn, override

from taketurns._eval.episode import Episode
from taketurns._exchange.outcome import record_cause
from taketurns._exchange.task import Task
from taketurns._exchange.trace import ErrorInfo, JudgeCall, Trace, Turn, Usage
from taketurns._models.messages import Message
from taketurns._models.wire import from_wire, register_messages, to_wire

__all__ = [
    "FORMAT",
    "dumps_episode",
    "episode_from",
    "expand_turns",
    "loads_episode",
    "parse_record",
    "read_episodes",
    "record",
]

# The record's format version, on every line as ``format``. 1 (no ``format`` key):
# ``ok`` was False for timeouts too and a seat's failure could be a game result; no
# ``cause`` or ``attempts``; each turn's ``request`` in full. 2: ``ok``/``cause``/
# ``attempts`` as ``_exchange.outcome`` defines them. 3: a turn stores only what is
# new since the turn before (``request_prefix`` + ``request``: linear in the
# conversation). Readers accept every format (``parse_record`` rebuilds requests,
# ``outcome.record_cause`` works a cause out of a format-1 record).
FORMAT = 3

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


def _trace_out(trace: Trace) -> dict[str, Any]:
    # Written out by hand: this runs once per trace of every episode, on the eval's
    # hot path (tests/test_records.py checks the keys against Trace's fields). A
    # turn's request shares its message objects with the conversation: each object
    # is converted to wire shape once per trace, not once per turn.
    memo: dict[int, dict[str, Any]] = {}

    def wire(message: Message) -> dict[str, Any]:
        out = memo.get(id(message))
        if out is None:
            out = memo[id(message)] = to_wire(message)
        return out

    agent, episode, timing = trace.agent, trace.episode, trace.timing
    return {
        "agent": {
            "name": agent.name,
            "model": agent.model,
            "harness": agent.harness,
            "trainable": agent.trainable,
        },
        "episode": {
            "id": episode.id,
            "env": episode.env,
            "task_idx": episode.task_idx,
            "rollout": episode.rollout,
            "seed": episode.seed,
        },
        "task": _task_out(trace.task),
        "masked": trace.masked,
        "turns": _turns_out(trace.turns, wire),
        "messages": [wire(m) for m in trace.messages],
        "rewards": trace.rewards,
        "reward": trace.reward,
        "metrics": trace.metrics,
        "stop_condition": trace.stop_condition,
        "errors": [_error_out(e) for e in trace.errors],
        "info": trace.info,
        "timing": {
            "started_at": timing.started_at,
            "ended_at": timing.ended_at,
            "agent_s": timing.agent_s,
            "scoring_s": timing.scoring_s,
        },
        "usage": _usage_out(trace.usage),
        "judge_calls": [_judge_out(call, wire) for call in trace.judge_calls],
        "turn_rewards": [
            {"turn": r.turn, "value": r.value, "name": r.name} for r in trace.turn_rewards
        ],
    }


def _error_out(error: ErrorInfo) -> dict[str, str]:
    return {
        "kind": error.kind,
        "message": error.message,
        "type": error.type,
        "where": error.where,
        "traceback": error.traceback,
    }


def _judge_out(call: JudgeCall, wire: Any) -> dict[str, Any]:
    return {
        "judge": call.judge,
        "model": call.model,
        "request": [wire(m) for m in call.request],
        "response": call.response,
        "score": call.score,
        "usage": _usage_out(call.usage),
        "latency_s": call.latency_s,
        "cached": call.cached,
        "error": call.error,
    }


def _turns_out(turns: list[Turn], wire: Any) -> list[dict[str, Any]]:
    """Each turn's request as what is new since the turn before: ``request_prefix``
    messages are the previous turn's request followed by its response (when it has
    one), ``request`` the rest. A conversation of n turns is stored in O(n) messages,
    not O(n^2); ``expand_turns`` rebuilds every request exactly."""
    out = []
    before: tuple[Message, ...] = ()
    answer: Message | None = None
    for turn in turns:
        shared = _shared(before, answer, turn.request)
        out.append(_turn_out(turn, wire, shared))
        before, answer = turn.request, turn.response
    return out


def _shared(
    before: tuple[Message, ...], answer: Message | None, request: tuple[Message, ...]
) -> int:
    """How many leading messages ``request`` shares with ``before + (answer,)``
    (identical objects, the common case, or equal ones)."""
    n = 0
    for a, b in zip(before, request, strict=False):
        if a is not b and a != b:
            return n
        n += 1
    if n == len(before) and answer is not None and n < len(request):
        m = request[n]
        if m is answer or m == answer:
            n += 1
    return n


def expand_turns(turns: list[dict[str, Any]]) -> bool:
    """Rebuild, in place, each turn's full ``request`` of a format-3 trace record
    (``request_prefix`` + what is new); format 1-2 turns are left as they are. False
    when a prefix points past what the turn before holds (a damaged record)."""
    before: list[Any] = []
    for turn in turns:
        if not isinstance(turn, dict):
            return False
        shared = turn.pop("request_prefix", None)
        if shared is not None:
            if type(shared) is not int or not 0 <= shared <= len(before):
                return False
            turn["request"] = before[:shared] + list(turn.get("request") or [])
        before = list(turn.get("request") or [])
        if turn.get("response") is not None:
            before.append(turn["response"])
    return True


def _turn_out(turn: Turn, wire: Any, shared: int = 0) -> dict[str, Any]:
    return {
        "index": turn.index,
        "request_prefix": shared,
        "request": [wire(m) for m in turn.request[shared:]],
        "response": None if turn.response is None else wire(turn.response),
        "usage": _usage_out(turn.usage),
        "finish_reason": turn.finish_reason,
        "latency_s": turn.latency_s,
        "error": turn.error,
        "tools": list(turn.tools),
        "token_ids": turn.token_ids,
        "prompt_token_ids": turn.prompt_token_ids,
        "logprobs": turn.logprobs,
        "policy_version": turn.policy_version,
        "seed": turn.seed,
        "sampling": turn.sampling,
        "stop_token": turn.stop_token,
        "retokenized": turn.retokenized,
        "token_gap": turn.token_gap,
    }


record.register_unstructure_hook(Trace, _trace_out)
record.register_structure_hook(
    Trace,
    make_dict_structure_fn(Trace, record, state=override(omit=True)),
)


def _episode_out(episode: Episode) -> dict[str, Any]:
    # by hand, like _trace_out (tests/test_records.py checks the keys)
    timing = episode.timing
    return {
        "id": episode.id,
        "env": episode.env,
        "task": _task_out(episode.task),
        "rollout": episode.rollout,
        "format": FORMAT,
        "ok": episode.ok,
        "cause": episode.cause,
        "attempts": episode.attempts,
        "stop": episode.stop,
        "errors": [_error_out(e) for e in episode.errors],
        "traces": [_trace_out(t) for t in episode.traces],
        "timing": {
            "started_at": timing.started_at,
            "ended_at": timing.ended_at,
            "wall_s": timing.wall_s,
        },
        "info": episode.info,
        "seed": episode.seed,
    }


record.register_unstructure_hook(Episode, _episode_out)


def dumps_episode(episode: Episode) -> str:
    """One JSON line (no trailing newline). Values that are not JSON become strings,
    as do keys that are not strings."""
    return episode_line(episode).decode()


def episode_line(episode: Episode) -> bytes:
    """``dumps_episode`` as UTF-8 bytes, as written to episodes.jsonl."""
    out = _episode_out(episode)
    try:
        return orjson.dumps(out, default=str)
    except TypeError:  # a key that is not a string (checking keys doubles the cost)
        return orjson.dumps(_str_keys(out), default=str)


def _str_keys(value: Any) -> Any:
    """``value`` with every dict key a string (``str(key)`` when it is not)."""
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _str_keys(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_str_keys(v) for v in value]
    return value


def loads_episode(line: str | bytes) -> Episode:
    """An ``Episode`` from one JSONL line (any format; requests rebuilt in full)."""
    raw = parse_record(line.encode() if isinstance(line, str) else line)
    if raw is None:
        raise ValueError("not an episode record (damaged line)")
    return episode_from(raw)


def episode_from(raw: dict[str, Any]) -> Episode:
    """An ``Episode`` from a record ``parse_record`` (or ``read_episodes``) gave;
    cattrs' errors pass through for a record that does not structure."""
    episode = record.structure(raw, Episode)
    if "cause" not in raw:  # format 1: ``ok`` meant something else; the rule decides
        episode.cause = record_cause(raw)
        episode.ok = episode.cause is None
    return episode


def parse_record(raw: bytes) -> dict[str, Any] | None:
    """One ``episodes.jsonl`` line as its record, or None when it is damaged: not
    JSON, not an object, without a non-negative integer ``task.idx`` and ``rollout``, or valid
    JSON in the wrong shape (``_well_shaped``: ``"reward": "x"``, ``"turns": 5``)."""
    try:
        found = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(found, dict):
        return None
    task = found.get("task")
    idx = task.get("idx") if isinstance(task, dict) else None
    rollout = found.get("rollout")
    if type(idx) is not int or type(rollout) is not int or idx < 0 or rollout < 0:
        return None
    if not _well_shaped(found):
        return None
    for trace in found.get("traces") or ():
        if not expand_turns(trace.get("turns") or []):
            return None
    return found


# The types of the fields the engine reads back (the summary, a resume, the report,
# export), each checked when present: a record that has one of another type is
# damaged, set aside like a torn line, never a traceback further on. Null is accepted
# only where the record's own type is optional (``cause``, ``stop``,
# ``stop_condition``): everything else structures into a list, a table or a value.
_EPISODE_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str,),
    "env": (str,),
    "ok": (bool,),
    "cause": (str, type(None)),
    "stop": (str, type(None)),
    "attempts": (int,),
    "errors": (list,),
    "traces": (list,),
    "info": (dict,),
}
_TRACE_TYPES: dict[str, tuple[type, ...]] = {
    "agent": (dict,),
    "episode": (dict,),
    "task": (dict,),
    "turns": (list,),
    "messages": (list,),
    "rewards": (dict,),
    "metrics": (dict,),
    "stop_condition": (str, type(None)),
    "errors": (list,),
    "usage": (dict,),
    "info": (dict,),
    "judge_calls": (list,),
    "turn_rewards": (list,),
}


# What the check compares: ``parse_record`` checks only what ``orjson.loads`` gives,
# whose values are of exactly these types, so each allowed tuple becomes the set of
# the JSON types ``isinstance`` accepts for it (``int`` takes ``bool`` too): one set
# lookup per field, the same answers. ``_ABSENT`` (a key not in the record) is of
# type ``object``, in every set: a missing field is never wrong.
_JSON_TYPES = (dict, list, str, int, float, bool, type(None))
_ABSENT = object()


def _exact(types: dict[str, tuple[type, ...]]) -> tuple[tuple[str, frozenset[type]], ...]:
    return tuple(
        (key, frozenset([object, *(t for t in _JSON_TYPES if issubclass(t, kinds))]))
        for key, kinds in types.items()
    )


_EPISODE_EXACT = _exact(_EPISODE_TYPES)
_TRACE_EXACT = _exact(_TRACE_TYPES)


def _typed(record: dict[str, Any], types: tuple[tuple[str, frozenset[type]], ...]) -> bool:
    # plain loops (no generator per check): this runs for every line read back
    get = record.get
    for key, kinds in types:
        if type(get(key, _ABSENT)) not in kinds:
            return False
    errors = get("errors")
    if errors:
        for error in errors:
            if type(error) is not dict:
                return False
    return True


def _number(value: Any) -> bool:
    kind = type(value)
    if kind is float or kind is int:  # what JSON gives: the common case, answered first
        return True
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(values: Any) -> bool:
    for value in values:
        kind = type(value)
        if kind is not float and kind is not int and not _number(value):
            return False
    return True


def _turn_reward(raw: Any) -> bool:
    return (
        isinstance(raw, dict)
        and type(raw.get("turn")) is int
        and _number(raw.get("value"))
        and isinstance(raw.get("name", ""), str)
    )


def _well_shaped(record: dict[str, Any]) -> bool:
    """Whether every field the engine reads back has its type (see above)."""
    if not _typed(record, _EPISODE_EXACT):
        return False
    for trace in record.get("traces") or ():
        if type(trace) is not dict or not _typed(trace, _TRACE_EXACT):
            return False
        if "reward" in trace and not _number(trace["reward"]):
            return False
        if not _numbers((trace.get("rewards") or {}).values()):
            return False
        if not _numbers((trace.get("metrics") or {}).values()):
            return False
        if not _numbers((trace.get("usage") or {}).values()):
            return False
        for turn in trace.get("turns") or ():
            if not isinstance(turn, dict):
                return False
        for reward in trace.get("turn_rewards") or ():
            if not _turn_reward(reward):
                return False
        name = (trace.get("agent") or {}).get("name", "")
        if not isinstance(name, str):
            return False
    return True


def read_episodes(
    path: str | Path, *, damaged: list[int] | None = None
) -> Iterator[dict[str, Any]]:
    """The raw episode objects in ``path`` (an ``episodes.jsonl``), streamed one line
    at a time, in either record format (``FORMAT``). Damaged lines (not a JSON
    object with ``task.idx`` and ``rollout``; a torn last line) are skipped; pass a
    list as ``damaged`` to collect their line numbers."""
    with Path(path).open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            found = parse_record(raw)
            if found is None:
                if damaged is not None:
                    damaged.append(number)
                continue
            yield found
