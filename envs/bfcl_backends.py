"""BFCL's multi-turn backends for one episode, and BFCL's own checker on what they ran.

Everything BFCL-specific comes from BFCL's package (``bfcl-eval``, imported lazily,
never copied): the tasks and their function docs (``bfcl_eval.utils.load_dataset_entry``,
which also holds back ``miss_func``'s functions), the ground truth, the backend classes
(``func_source_code``: file system, math, messaging, posting, tickets, trading, travel,
vehicle control) and the checker (``multi_turn_checker``).

Isolation: BFCL's own executor keeps backend instances in its module's ``globals()``
under ``{model}_{task id}_{class}_instance``, so two rollouts of one task would share
state. ``Backends`` instantiates the classes itself, one set per episode, and calls
their methods directly (never ``eval``). The checker replays the episode's calls in
BFCL's executor under a name no other episode uses, and its instances are removed
from that module's globals when it returns.

What the model sees of a call is what BFCL's inference shows it: a string result as
is, a dict as JSON, anything else as ``str``; an exception as ``Error during
execution: ...``. The checker gets exactly the calls the backends executed, as BFCL
call strings (``cd(folder='document')``), grouped by user turn and by model call.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import itertools
import json
import keyword
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from taketurns import ConfigError, Tool, ToolMessage
from taketurns.harness import ToolCall

__all__ = [
    "CATEGORIES",
    "INSTALL",
    "Backends",
    "BfclTool",
    "Entry",
    "call_string",
    "check",
    "entries",
    "openai_tool",
]

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
BFCL_VERSION = "2026.3.23"
INSTALL = f"pip install --no-deps bfcl-eval=={BFCL_VERSION} && pip install 'taketurns[bfcl]'"

Entry = tuple[dict[str, Any], list[list[str]]]  # (BFCL's test entry, its ground truth)


@functools.cache
def bfcl() -> Any:
    """BFCL's modules the env uses (a namespace), or ``ConfigError`` naming the
    install command. Importing ``bfcl_eval.utils`` makes BFCL's ``result/``,
    ``score/`` and ``.file_locks/`` beside its package (BFCL's own behaviour; its
    ``BFCL_PROJECT_ROOT`` variable moves them)."""
    try:
        from bfcl_eval import utils
        from bfcl_eval.constants import default_prompts, executable_backend_config, type_mappings
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
    except ModuleNotFoundError as exc:
        what = "BFCL's package (bfcl_eval)" if exc.name == "bfcl_eval" else f"{exc.name!r}"
        raise ConfigError(
            f"env: bfcl-multi-turn needs {what}, which is not installed: {INSTALL}"
        ) from exc
    except OSError as exc:  # its import makes directories beside the package
        raise ConfigError(
            f"env: importing bfcl_eval failed ({exc}); it writes result/ and score/ beside "
            "its package: set BFCL_PROJECT_ROOT to a writable directory"
        ) from exc
    return type(
        "Bfcl",
        (),
        {
            "utils": utils,
            "prompts": default_prompts,
            "backends": executable_backend_config,
            "types": type_mappings,
            "checker": multi_turn_checker,
            "executor": multi_turn_utils,
        },
    )


@functools.cache
def entries(category: str) -> tuple[Entry, ...]:
    """The tasks of one multi-turn category with their ground truth, in BFCL's order,
    loaded by BFCL (function docs added, ``miss_func``'s held back, the Python hint on
    every description). Imports every backend class the category uses, so a missing
    dependency (``mpmath``) is one ``ConfigError`` before any episode."""
    b = bfcl()
    name = f"multi_turn_{category}"
    tasks = b.utils.load_dataset_entry(name)
    truth = {g["id"]: g["ground_truth"] for g in b.utils.load_ground_truth_entry(name)}
    for cls in {c for e in tasks for c in e["involved_classes"]}:
        backend_class(cls)
    return tuple((e, truth[e["id"]]) for e in tasks)


@functools.cache
def backend_class(name: str) -> type:
    """BFCL's backend class ``name`` (``ConfigError`` when its module cannot import)."""
    module_name = bfcl().backends.CLASS_FILE_PATH_MAPPING[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"env: BFCL's {name} backend needs {exc.name!r}, which is not installed: "
            "pip install 'taketurns[bfcl]'"
        ) from exc
    cls: type = getattr(module, name)
    return cls


def _openai_type(schema: Mapping[str, Any]) -> dict[str, Any]:
    """One parameter schema in OpenAI's JSON-schema types, as BFCL's OpenAI
    function-calling handler sends it (``GORILLA_TO_OPENAPI``; a float is a number
    with ``format: float`` and a note; nested items and properties likewise)."""
    mapping: Mapping[str, str] = bfcl().types.GORILLA_TO_OPENAPI
    out = dict(schema)
    kind = out.get("type", "string")
    if kind == "float":
        out["format"] = "float"
        out["description"] = out.get("description", "") + " This is a float type value."
    out["type"] = mapping.get(kind, "string")
    if "properties" in out:
        out["properties"] = {k: _openai_type(v) for k, v in out["properties"].items()}
    if "items" in out:
        items = dict(out["items"])
        items["type"] = mapping.get(items.get("type", "string"), "string")
        out["items"] = items
    return out


def openai_tool(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The OpenAI tool object for one BFCL function doc (its ``response`` is not sent)."""
    params = doc["parameters"]
    return {
        "type": "function",
        "function": {
            "name": doc["name"],
            "description": doc["description"],
            "parameters": {
                **params,
                "type": "object",
                "properties": {k: _openai_type(v) for k, v in params["properties"].items()},
            },
        },
    }


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_arguments(raw: str) -> dict[str, Any]:
    """The model's JSON arguments as a dict; ``ValueError`` saying what is wrong."""
    args = json.loads(raw or "{}", parse_constant=_no_constant)
    if not isinstance(args, dict):
        raise ValueError("the arguments must be a JSON object")
    return args


def call_string(name: str, args: Mapping[str, Any]) -> str:
    """The BFCL call string for a call of ``name`` with JSON ``args``: keyword
    arguments as BFCL writes them (``name(k=repr(v),...)``); argument names that are
    not Python names go as ``name(**{...})``, so the string never runs anything but
    the call."""
    if all(k.isidentifier() and not keyword.iskeyword(k) for k in args):
        return f"{name}({','.join(f'{k}={v!r}' for k, v in args.items())})"
    return f"{name}(**{dict(args)!r})"


def _result_text(result: Any) -> str:
    """A call's result as BFCL's executor hands it to the model."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


class Backends:
    """One episode's backend instances and the functions offered to its model.

    ``functions`` are the function docs offered now; ``offer_held_back(turn)`` adds
    the ones ``miss_func`` holds back until ``turn``. ``calls[turn]`` are the
    executed calls of each user turn as BFCL call strings, one list per model call
    (``step`` tells which model call made a call: the number of model calls recorded
    so far, set by the env)."""

    def __init__(self, entry: Mapping[str, Any]) -> None:
        self.entry = entry
        self.long_context = "long_context" in entry["id"]
        # the docs are shared and never changed; the lists are this episode's own
        self.functions: list[dict[str, Any]] = list(entry["function"])
        self.held_back = {k: list(v) for k, v in entry.get("missed_function", {}).items()}
        self.instances: dict[str, Any] = {}
        self.methods: dict[str, Any] = {}  # public method name -> bound method
        stateless = bfcl().backends.STATELESS_CLASSES
        config = entry.get("initial_config", {})
        for name in entry["involved_classes"]:
            instance = backend_class(name)()
            if name not in stateless:
                scenario = copy.deepcopy(config.get(name, {}))
                instance._load_scenario(scenario, long_context=self.long_context)
            self.instances[name] = instance
            for method, bound in inspect.getmembers(instance, predicate=inspect.ismethod):
                if not method.startswith("_"):
                    self.methods[method] = bound  # a later class wins, as in BFCL
        self.turn = 0
        self.step: Callable[[], int] = lambda: 0
        self.turn_began = 0  # the number of model calls made before this user turn
        self.calls: list[list[tuple[int, str]]] = []

    def offer_held_back(self, turn: int) -> bool:
        """Add the functions held back until ``turn``; True when there were some."""
        docs = self.held_back.pop(str(turn), [])
        self.functions.extend(docs)
        return bool(docs)

    def tools(self) -> list[BfclTool]:
        """The offered functions as tools bound to these backends."""
        return [BfclTool(self, doc) for doc in self.functions]

    def start_turn(self, turn: int) -> None:
        """Calls from now on belong to user turn ``turn``."""
        self.turn, self.turn_began = turn, self.step()
        self._grow(turn)

    def _grow(self, turn: int) -> None:
        while len(self.calls) <= turn:
            self.calls.append([])

    def execute(self, name: str, raw_arguments: str) -> str:
        """Run one call of an offered function, its arguments as JSON text; the text
        the model reads."""
        try:
            args = parse_arguments(raw_arguments)
        except ValueError as exc:
            return f"Error during execution: the arguments are not valid JSON ({exc})"
        return self.run(name, args)

    def offers(self, name: str) -> bool:
        return any(doc["name"] == name for doc in self.functions)

    def run(self, name: str, args: Mapping[str, Any]) -> str:
        """Run one call of an offered function; the text the model reads."""
        self._grow(self.turn)
        self.calls[self.turn].append((self.step(), call_string(name, args)))
        try:
            return _result_text(self.methods[name](**args))
        except Exception as exc:
            return f"Error during execution: {exc}"

    def model_result(self, turns: int) -> list[list[list[str]]]:
        """The calls of the first ``turns`` user turns as BFCL's decoded model result:
        per turn, per model call, the call strings."""
        self._grow(max(turns - 1, 0))
        result = []
        for calls in self.calls[:turns]:
            steps = itertools.groupby(calls, key=lambda c: c[0])
            result.append([[s for _, s in group] for _, group in steps])
        return result


class BfclTool(Tool):
    """One BFCL function offered as a tool: its schema from BFCL's doc, its call run
    on the episode's own backend instance."""

    def __init__(self, backends: Backends, doc: Mapping[str, Any]) -> None:
        self.backends = backends
        self.schema = openai_tool(doc)
        self.name = doc["name"]

    async def call(self, call: ToolCall) -> ToolMessage:
        return ToolMessage(call.id, self.backends.execute(self.name, call.arguments), self.name)


_run_ids = itertools.count()


def check(entry: Mapping[str, Any], truth: Sequence[Sequence[str]], backends: Backends) -> dict:
    """BFCL's verdict on the episode: ``valid``, and when not, ``error_type``,
    ``error_message`` and the checker's ``details`` cut to what explains it (the state
    ``differences``, the ``missing_items``). A run that played fewer turns than the
    task has fails as BFCL fails a force-terminated one."""
    b = bfcl()
    played = sum(1 for _ in backends.calls)
    if played != len(truth):
        return {
            "valid": False,
            "error_type": "multi_turn:force_terminated",
            "error_message": (
                f"Model was force-terminated during inference phase. The length of the "
                f"model result turns ({played}) does not match the length of the ground "
                f"truth turns ({len(truth)})."
            ),
        }
    result = backends.model_result(played)
    category = entry["id"].rsplit("_", 1)[0]
    name = f"taketurns_{next(_run_ids)}_{id(backends)}"
    try:
        verdict = b.checker.multi_turn_checker(
            result, [list(t) for t in truth], dict(entry), category, name
        )
    finally:
        _forget(b.executor, name)
    return _compact(verdict)


def _forget(executor: Any, name: str) -> None:
    """Remove the instances BFCL's executor kept for model ``name`` (both the model's
    and the ground truth's, under ``{name}_eval`` and ``{name}_ground_truth_eval``)."""
    prefix = re.sub(r"[-./:]", "_", name)
    space = vars(executor)
    for key in [k for k in space if k.startswith(prefix) and k.endswith("_instance")]:
        del space[key]


def _compact(verdict: Mapping[str, Any]) -> dict[str, Any]:
    out = {"valid": bool(verdict.get("valid"))}
    if out["valid"]:
        return out
    out["error_type"] = verdict.get("error_type", "")
    out["error_message"] = verdict.get("error_message", "")
    details = verdict.get("details") or {}
    for key in ("differences", "missing_items"):
        if key in details:
            out[key] = _json_safe(details[key])
    return out


def _json_safe(value: Any) -> Any:
    """``value`` as plain JSON data (BFCL's objects by their ``repr``)."""
    return json.loads(json.dumps(value, default=repr))
