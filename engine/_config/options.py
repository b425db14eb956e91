"""Configuration records. Every option is an attrs field; ``taketurns._config.settings`` loads
them from TOML and dotted command-line overrides and refuses bad values by name.

Range checks live in attrs validators, so a config built in Python is checked the
same way as one loaded from a file.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from taketurns._config.suggest import choices_text, did_you_mean
from taketurns._errors import OptionError

__all__ = [
    "DEFAULT_MODEL",
    "AgentConfig",
    "EnvConfig",
    "EvalConfig",
    "Limits",
    "Sampling",
    "Timeouts",
    "at_least",
    "int_between",
    "one_of",
]


DEFAULT_MODEL = "builtin/bracket"  # what a role runs when nothing names its model


class Raw(str):
    """A value typed on the command line: converted by the field's type, not guessed.
    In an untyped field (``Any``) it stays text until its consumer gives it a type;
    ``harness_options`` and ``sampling.extra`` read it as a TOML literal."""


def literal(raw: str) -> Any:
    """``raw`` read as a TOML value (``4`` -> 4, ``[1, 2]`` -> list), else the text."""
    import tomllib

    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return str(raw)


def _literals(value: dict[str, Any]) -> dict[str, Any]:
    """Command-line values in an options table, read as TOML literals."""
    return {k: literal(v) if isinstance(v, Raw) else v for k, v in value.items()}


def at_least(minimum: float, *, exclusive: bool = False) -> Any:
    """An attrs validator: None, or a number >= minimum (> minimum if exclusive)."""
    sign = ">" if exclusive else ">="

    def check(inst: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
        if value is None:
            return
        bad = value <= minimum if exclusive else value < minimum
        if bad or isinstance(value, bool):
            kind = "a number" if "float" in str(attribute.type) else "an integer"
            raise OptionError(attribute.name, value, f"{kind} {sign} {minimum:g}")

    return check


def _one_of(*choices: str) -> Any:
    """An attrs validator: one of ``choices``."""

    def check(inst: object, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in choices:
            hint = did_you_mean(str(value), choices)
            raise OptionError(
                attribute.name, value, " or ".join(choices) + (f"; {hint}" if hint else "")
            )

    return check


def one_of(
    choices: Sequence[str] | Callable[[], Sequence[str]],
    *,
    what: str = "a value",
    listing: str | None = None,
) -> Any:
    """An attrs validator: one of ``choices`` (or of what ``choices()`` returns, asked
    only when a value is checked: a heavy import stays lazy). A refused value is
    answered with the near misses ("did you mean"); a long list is not spelled out but
    named by ``listing``, the command that prints it (``taketurns envs ID``)."""

    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        names = list(choices() if callable(choices) else choices)
        if value not in names:
            text = choices_text(str(value), names, what=what, listing=listing)
            raise OptionError(attribute.name, value, text)

    return check


def int_between(low: int, high: int | None = None) -> Any:
    """An attrs validator: an integer (not a bool) >= ``low`` and, if given, <= ``high``.
    Unlike ``at_least`` it refuses None and non-integers built in Python too."""
    accepted = f"an integer >= {low}" if high is None else f"an integer from {low} to {high}"

    def check(inst: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if isinstance(value, bool) or not isinstance(value, int):
            raise OptionError(attribute.name, value, accepted)
        if value < low or (high is not None and value > high):
            raise OptionError(attribute.name, value, accepted)

    return check


_positive = at_least(0, exclusive=True)
_non_negative = at_least(0)


# What can make an episode fail (the rule that assigns them: ``_exchange.outcome``)
CAUSES = ("env", "model", "harness", "scoring", "cancelled")


def _causes(inst: object, attribute: attrs.Attribute[Any], value: list[str]) -> None:
    """An attrs validator: failure causes (``CAUSES``) that a retry may cure (not
    ``cancelled``)."""
    allowed = [c for c in CAUSES if c != "cancelled"]
    for cause in value:
        if cause not in allowed:
            raise OptionError(attribute.name, value, f"a list of {', '.join(allowed)}")


def parse_limit(value: Any) -> int | str | None:
    """A ``max_failures`` value: None, an integer >= 0, or ``"P%"`` with 0 <= P <= 100
    (as text: a count may come as ``"12"``). Raises ``ValueError`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(value)
        return value
    if not isinstance(value, str):
        raise ValueError(value)
    text = value.strip()
    if text.endswith("%"):
        percent = float(text[:-1])
        if not 0 <= percent <= 100 or math.isnan(percent):
            raise ValueError(value)
        return f"{percent:g}%"
    return parse_limit(int(text))


def _failure_limit(value: Any) -> int | str | None:
    """An attrs converter: ``max_failures`` as ``parse_limit`` reads it."""
    try:
        return parse_limit(value)
    except ValueError:
        raise OptionError("max_failures", value, 'an integer >= 0 or a percentage ("5%")') from None


@attrs.define
class Sampling:
    """Request fields sent with every model call; None means "the endpoint's default".
    ``extra`` is merged into the request body as is (e.g. vLLM's ``top_k``)."""

    temperature: float | None = attrs.field(default=None, validator=_non_negative)
    top_p: float | None = attrs.field(default=None, validator=_non_negative)
    max_tokens: int | None = attrs.field(default=None, validator=_positive)
    seed: int | None = None
    stop: list[str] | None = None
    logprobs: bool | None = None
    extra: dict[str, Any] = attrs.field(factory=dict, converter=_literals)

    def request_fields(self) -> dict[str, Any]:
        fields = {k: v for k, v in attrs.asdict(self, recurse=False).items() if v is not None}
        fields.pop("extra", None)
        return {**fields, **self.extra}

    def over(self, base: Sampling) -> Sampling:
        """This sampling with its unset fields taken from ``base``."""
        merged = {}
        for f in attrs.fields(Sampling):
            if f.name != "extra":
                mine = getattr(self, f.name)
                merged[f.name] = getattr(base, f.name) if mine is None else mine
        return Sampling(**merged, extra={**base.extra, **self.extra})


@attrs.define
class Limits:
    """Per-rollout budgets, checked before every model call and before a segment
    launches. Token limits count what the rollout has used so far. ``max_segment_turns``
    caps the model calls of one segment (a runaway agent, sub-agents...); None takes
    the harness's default (``Harness.segment_turns``: 100 for the agent CLIs, no cap
    for the in-process harnesses): set a number to change it."""

    max_turns: int | None = attrs.field(default=None, validator=_positive)
    max_segment_turns: int | None = attrs.field(default=None, validator=_positive)
    max_input_tokens: int | None = attrs.field(default=None, validator=_positive)
    max_output_tokens: int | None = attrs.field(default=None, validator=_positive)
    max_total_tokens: int | None = attrs.field(default=None, validator=_positive)


@attrs.define
class Timeouts:
    """Seconds. ``segment_s`` bounds one segment; ``rollout_s`` is the agent budget,
    spent only while the rollout's own segments run; ``scoring_s`` bounds finalize +
    scoring at close."""

    segment_s: float | None = attrs.field(default=None, validator=_positive)
    rollout_s: float | None = attrs.field(default=None, validator=_positive)
    scoring_s: float = attrs.field(default=30.0, validator=_positive)


_limit = int_between(1)


@attrs.define
class SandboxLimits:
    """A sandbox's resource limits, per sandboxed process tree (one segment's program,
    or one long-lived one): ``processes`` alive at once, ``memory_mb`` resident in
    all, ``open_files`` per process, ``cpu_s`` CPU seconds in all, ``scratch_mb``
    written to its scratch (and the size of its ``/tmp``), ``shm_mb`` the size of its
    ``/dev/shm``. What passing one does: ``taketurns._procs.limits``."""

    processes: int = attrs.field(default=256, validator=_limit)
    memory_mb: int = attrs.field(default=4096, validator=_limit)
    open_files: int = attrs.field(default=4096, validator=_limit)
    cpu_s: int = attrs.field(default=3600, validator=_limit)
    scratch_mb: int = attrs.field(default=2048, validator=_limit)
    shm_mb: int = attrs.field(default=256, validator=_limit)


def _no_sandbox(value: str | None) -> str:
    """``sandbox``: None (what ``none`` on the command line is) means ``none``."""
    return "none" if value is None else value


@attrs.define
class AgentConfig:
    """One role of an env. Unset endpoint fields (None) take the eval's values."""

    model: str | None = None
    base_url: str | None = None
    api_key_var: str | None = None
    harness: str | None = None  # None: the env's choice (env.default_harness), else null
    harness_options: dict[str, Any] = attrs.field(factory=dict, converter=_literals)
    sampling: Sampling = attrs.field(factory=Sampling)
    limits: Limits = attrs.field(factory=Limits)
    timeouts: Timeouts = attrs.field(factory=Timeouts)
    retries: int = attrs.field(default=0, validator=_non_negative)
    trainable: bool = True
    max_concurrent_calls: int | None = attrs.field(default=None, validator=_positive)
    # out-of-process harnesses: each rollout's processes in a bubblewrap sandbox
    # ("bwrap") or not ("none", with a warning; None, which `--env.<role>.sandbox=none`
    # gives, is "none" too); "host" network opens the host's network to them
    # (default: only the model endpoint)
    sandbox: str | None = attrs.field(
        default="bwrap", converter=_no_sandbox, validator=_one_of("bwrap", "none")
    )
    sandbox_network: str = attrs.field(default="endpoint", validator=_one_of("endpoint", "host"))
    # a sandbox's resource limits (taketurns._procs.limits): on by default
    sandbox_limits: SandboxLimits = attrs.field(factory=SandboxLimits)


@attrs.define
class EnvConfig:
    """Base of every env's config. Subclasses add ``AgentConfig`` fields (one per
    role) and their own options."""


@attrs.define
class EvalConfig:
    """One eval run. ``env`` holds the env's own config (its class comes from the env)."""

    env_id: str
    num_tasks: int = attrs.field(default=10, validator=_positive)
    rollouts: int = attrs.field(default=1, validator=_positive)
    concurrency: int = attrs.field(default=32, validator=_positive)
    # the run's one seed (``_exchange.seeds``): the env's tasks, each episode's RNG
    # (``agents.rng``), the built-in model's choices and the ``seed`` sent with every
    # model call all derive from it; the default, 0, makes every run reproducible
    seed: int = attrs.field(default=0, validator=int_between(0))
    # --model: every role whose own config names no model runs it; None (not given):
    # each role runs its env's default (Env.default_model), else DEFAULT_MODEL
    model: str | None = None
    base_url: str | None = None
    api_key_var: str = "OPENAI_API_KEY"
    sampling: Sampling = attrs.field(factory=Sampling)
    max_concurrent_calls: int | None = attrs.field(default=None, validator=_positive)
    episode_timeout_s: float | None = attrs.field(default=None, validator=_positive)
    # an episode that failed by one of ``retry_causes`` (``_exchange.outcome``) is
    # played again, up to ``episode_retries`` more times, before it is recorded failed
    episode_retries: int = attrs.field(default=0, validator=_non_negative)
    retry_causes: list[str] = attrs.field(factory=lambda: ["model", "harness"], validator=_causes)
    # the model clients' (the judges' too): seconds one attempt may take (connect to
    # last byte), retries of a failed call (429, 408, 5xx, connection errors,
    # timeouts) and the first backoff (doubled each retry, with jitter, capped at 30 s;
    # a server's Retry-After wins)
    request_timeout_s: float = attrs.field(default=600.0, validator=_positive)
    request_retries: int = attrs.field(default=3, validator=_non_negative)
    request_backoff_s: float = attrs.field(default=0.5, validator=_non_negative)
    # the whole endpoint check before the first episode, retries included
    preflight_timeout_s: float = attrs.field(default=30.0, validator=_positive)
    # a model server the eval starts and owns (taketurns._models.server): a command
    # serving the OpenAI API, with {port} where the free port taketurns picks goes;
    # every role with no base URL and a model that is neither builtin/ nor llamacpp/
    # is sent to it.
    # A llamacpp/ model starts llama.cpp's server on its own (taketurns._models.local),
    # its command line extended by model_server_args (e.g. "--n_ctx 8192").
    # model_server_timeout_s: how long a server may take to answer /v1/models.
    model_server: str | None = None
    model_server_args: str = ""
    model_server_timeout_s: float = attrs.field(default=300.0, validator=_positive)
    # where the interception server listens (loopback unless configured otherwise) and
    # the URL programs on other machines should use to reach it
    interception_host: str = "127.0.0.1"
    interception_port: int = attrs.field(default=0, validator=_non_negative)
    interception_public_url: str | None = None
    # the largest request body the interception server accepts (413 beyond it, an
    # OpenAI-style error); generous: an agent CLI's request with a few images fits
    interception_max_body_bytes: int = attrs.field(default=32 * 1024 * 1024, validator=_positive)
    output_dir: str | None = None
    # stop admitting episodes once more than this many of the run's episodes failed:
    # N, or "P%" of the episodes the run plays; None: stop when the model endpoint is
    # plainly down (``_eval.brake``)
    max_failures: int | str | None = attrs.field(default=None, converter=_failure_limit)
    # where episodes run: this process, Ray workers (taketurns._backends.ray) or worker
    # processes on this machine (taketurns._backends.processes); how many workers (None: one
    # per CPU); the address of the Ray cluster (None: RAY_ADDRESS, else a private
    # local instance)
    backend: str = attrs.field(default="local", validator=_one_of("local", "ray", "processes"))
    workers: int | None = attrs.field(default=None, validator=at_least(1))
    ray_address: str | None = None
    env: Any = None
