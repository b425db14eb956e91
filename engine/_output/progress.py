"""The eval's progress line (rich, on stderr), made to read at any width.

One line: what is happening (``setting up``, ``eval``, ``writing summary and report``),
a bar, done/total, failed episodes, the running reward of each trainable agent (of the
first agent when none is trainable; labelled either way), episodes/s, tokens, elapsed
time and ETA. The line is laid out for the console's width at every redraw: the
count, the rate and the times always show (at 80 columns, and down to ~45); the bar
takes the space the fields leave (it shrinks, then goes, first); when the fields
themselves do not fit, they are shortened or dropped in ``_SHORTEN``'s order: tokens
first, the failures last.

Updating is synchronous and cheap (counters only); on a terminal rich's ``Live``
redraws from its own refresh thread (a library-owned thread, stopped in ``__exit__``),
so the clock keeps moving while no episode finishes. Elsewhere (a log file, CI) the
line is printed at each phase, every ``LOG_EVERY_S`` while episodes finish, and at
the end.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.text import Text

__all__ = ["EvalProgress"]

_BAR_MIN = 10
LOG_EVERY_S = 30.0  # how often a console that is not a terminal gets a progress line
_GAP = "  "


def clock(seconds: float | None, *, short: bool = False) -> str:
    """``h:mm:ss`` (``m:ss`` if ``short``: under an hour); dashes when unknown."""
    if seconds is None:
        return "-:--" if short else "-:--:--"
    whole = int(seconds)
    if short:
        return f"{whole // 60}:{whole % 60:02d}"
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def _tokens(n: int) -> str:
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.1f}{unit} tok"
    return f"{n} tok"


def _two_decimals(mean: str) -> str:
    """A shown mean with two decimals (``-``, no mean yet, as it is)."""
    return mean if mean == "-" else f"{float(mean):+.2f}"


class _Agent:
    __slots__ = ("reward_sum", "traces", "trainable")

    def __init__(self, trainable: bool) -> None:
        self.trainable = trainable
        self.reward_sum = 0.0
        self.traces = 0


_BEFORE = ("eval", "setting up", "starting model server")  # phases before the episodes end


class EvalProgress:
    """Counts finished episodes (``add``) and shows them; ``phase`` names what the eval
    is doing. A context manager: the line is live between enter and exit."""

    def __init__(
        self,
        total: int,
        *,
        done: int = 0,
        enabled: bool = True,
        console: Console | None = None,
    ) -> None:
        self.total = total
        self.episodes = done
        self.failed = 0
        self.tokens = 0
        self.enabled = enabled
        self.label = "setting up"
        self.agents: dict[str, _Agent] = {}
        self._done_before = done
        self._started = time.monotonic()
        self._ended: float | None = None  # the clock stops when the episodes are done
        self._console = console or Console(stderr=True)
        # not a terminal (a log file, CI): no redrawing, so a plain line now and then
        self._plain = not self._console.is_terminal
        self._logged = self._started
        self._live = Live(_Line(self), console=self._console, refresh_per_second=8, transient=False)

    def __enter__(self) -> EvalProgress:
        if self.enabled:
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._live.stop()
            if not self._console.is_terminal:  # rich ends the line on a terminal only
                self._console.line()

    def phase(self, label: str) -> None:
        """Say what the eval is doing now (shown at the start of the line); any phase
        but ``eval``, ``setting up`` and ``starting model server`` comes after the
        episodes and stops the clock."""
        self.label = label
        if label not in _BEFORE and self._ended is None:
            self._ended = time.monotonic()
        if self.enabled:
            self._live.refresh()
            if self._plain and label != "done":  # "done": the last line, printed at exit
                self._log()

    def note(self, text: str) -> None:
        """Print one line above the progress line (never wrapped, never markup)."""
        self._console.print(Text(text, style="red"), soft_wrap=True)

    def add(self, digested: Mapping[str, Any]) -> None:
        """Count one finished episode, given its ``summary.digest``."""
        self.label = "eval"
        self.episodes += 1
        self.failed += not digested["ok"]
        for trace in digested["traces"]:
            agent = trace["agent"]
            stats = self.agents.get(agent["name"])
            if stats is None:
                stats = self.agents[agent["name"]] = _Agent(agent.get("trainable", True))
            if digested["ok"]:  # a failed episode's rewards are not the model's
                stats.reward_sum += trace["reward"]
                stats.traces += 1
            self.tokens += trace["usage"]["total_tokens"]
        if self._plain and self.enabled and time.monotonic() - self._logged >= LOG_EVERY_S:
            self._log()

    def _log(self) -> None:
        self._logged = time.monotonic()
        self._console.print(_Line(self))

    # --- what the line shows ----------------------------------------------------------

    def rewards(self) -> list[str]:
        """``name +0.123`` for each trainable agent (else the first), in arrival order;
        ``name -`` while the agent has no ok trace (no mean yet, not 0)."""
        shown = [(n, a) for n, a in self.agents.items() if a.trainable]
        if not shown:
            shown = list(self.agents.items())[:1]
        return [f"{n} {a.reward_sum / a.traces:+.3f}" if a.traces else f"{n} -" for n, a in shown]

    def times(self) -> tuple[float, float, float | None]:
        """(elapsed s, episodes/s this run, ETA s or None)."""
        elapsed = (self._ended or time.monotonic()) - self._started
        new = self.episodes - self._done_before
        rate = new / elapsed if elapsed > 0 else 0.0
        left = self.total - self.episodes
        eta = left / rate if rate > 0 else (0.0 if left <= 0 else None)
        return elapsed, rate, eta


# How a line too wide for the console is shortened, one step at a time, until it fits:
# (field, what to do). The count, the rate and the times are never dropped.
_SHORTEN = (
    ("tokens", "drop"),
    ("times", "shorten"),
    ("rewards", "shorten"),  # without the word "reward"
    ("rewards", "shorten"),  # two decimals
    ("label", "shorten"),
    ("failed", "shorten"),  # ✗N
    ("rewards", "drop"),
    ("failed", "drop"),
)
_ORDER = ("label", "count", "failed", "rewards", "rate", "tokens", "times")


class _Line:
    """The renderable: lays the fields out for ``options.max_width``."""

    def __init__(self, progress: EvalProgress) -> None:
        self.progress = progress

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.render(options.max_width)

    def variants(self) -> dict[str, tuple[list[str], str]]:
        """Each field's texts, longest first, and its style."""
        p = self.progress
        elapsed, rate, eta = p.times()
        rewards = p.rewards()
        short = [r.rsplit(" ", 1) for r in rewards]
        two = " ".join(f"{name} {_two_decimals(value)}" for name, value in short)
        reward_texts = ["reward " + " ".join(rewards), " ".join(rewards), two] if rewards else []
        hours = elapsed >= 3600 or (eta or 0) >= 3600
        return {
            "label": ([p.label, p.label.split()[0]], "bold"),
            "count": ([f"{p.episodes}/{p.total}"], "bold"),
            "failed": ([f"{p.failed} failed", f"✗{p.failed}"], "red" if p.failed else "dim"),
            "rewards": (reward_texts, "cyan"),
            "rate": ([f"{rate:.1f} ep/s"], ""),
            "tokens": ([_tokens(p.tokens)], "dim"),
            "times": (
                [f"{clock(elapsed)} eta {clock(eta)}"]
                + ([] if hours else [f"{clock(elapsed, short=True)} eta {clock(eta, short=True)}"]),
                "yellow",
            ),
        }

    def render(self, width: int) -> Text:
        fields = self.variants()
        chosen = {name: texts[0] for name, (texts, _) in fields.items() if texts}
        for name, action in _SHORTEN:
            if _width(chosen) <= width:
                break
            if name not in chosen:
                continue
            texts = fields[name][0]
            if action == "drop":
                del chosen[name]
            elif texts.index(chosen[name]) + 1 < len(texts):
                chosen[name] = texts[texts.index(chosen[name]) + 1]
        line = Text(no_wrap=True, overflow="ellipsis")
        spare = width - _width(chosen) - len(_GAP)
        for i, name in enumerate(n for n in _ORDER if n in chosen):
            if i:
                line.append(_GAP)
            line.append(chosen[name], style=fields[name][1])
            if name == "label" and spare >= _BAR_MIN:
                line.append(_GAP)
                line.append_text(_bar(min(spare, 40), self.progress.episodes, self.progress.total))
        return line


def _width(chosen: dict[str, str]) -> int:
    return sum(len(text) for text in chosen.values()) + len(_GAP) * (len(chosen) - 1)


def _bar(width: int, done: int, total: int) -> Text:
    filled = round(width * done / total) if total else width
    bar = Text("━" * filled, style="magenta")
    bar.append("━" * (width - filled), style="grey23")
    return bar
