"""``report.html`` built from a run's records: ``ReportFeed`` (fed each record, as an
eval writes it) and ``write_report`` (the same feed over one pass of a finished run's
``episodes.jsonl``); the page itself is ``_report.page``'s.
"""

from __future__ import annotations

import contextlib
import json
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from taketurns._errors import ConfigError, OutputError
from taketurns._output.records import read_episodes
from taketurns._report.env_parts import EnvFeed, EnvParts, env_from
from taketurns._report.markup import Json
from taketurns._report.page import page_html
from taketurns._report.scan import Scan

if TYPE_CHECKING:
    from taketurns._eval.env import Env

__all__ = ["MAX_TRANSCRIPTS", "REPORT", "ReportFeed", "write_report"]

REPORT = "report.html"
MAX_TRANSCRIPTS = 500


class ReportFeed:
    """``report.html`` built from a run's records as they come: ``add`` each record,
    then ``write``. An eval feeds it each episode as it is written (so the end of the
    run reads nothing again: only the page is left to write), ``write_report`` each
    record of a finished run's ``episodes.jsonl``; the same page either way.

    What it keeps is what the page shows (``Scan``): counts and sums, every failed
    episode, the ``max_transcripts`` first others; the env's own hooks (``EnvFeed``)
    read the records from threads of their own, in lockstep with ``add``. One thread
    adds and writes; ``write`` or ``close`` must be called on every path (each ends
    the hooks' threads; the first call counts)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        env: Env | None,
        rollouts: int | None = None,
        summarize: bool = False,
        max_transcripts: int = MAX_TRANSCRIPTS,
        notes: Sequence[str] = (),
    ) -> None:
        """``env``: the env whose hooks draw its own part (None: no such part);
        ``summarize``: the summary is computed from the records fed (``summary.json``
        is missing), not read; ``notes``: lines for the page (why the env's part is
        missing)."""
        self.run_dir = Path(run_dir)
        self.scan = Scan(max_transcripts, rollouts=rollouts, summarize=summarize)
        self._env = EnvFeed(env)
        self._notes = list(notes)
        self._parts: EnvParts | None = None

    def add(self, raw: Json) -> None:
        """One record (parsed: ``parse_record``'s), to the scan and the env's hooks."""
        self.scan.add(raw)
        self._env.add(raw)

    def close(self, env_id: str = "?") -> EnvParts:
        """End the env's hooks (joining their threads), once; what they drew (a hook's
        error that is not an ``Exception`` is raised by the first call)."""
        if self._parts is None:
            self._parts = EnvParts(notes=list(self._notes))
            drawn = self._env.close(env_id)
            self._parts.figures, self._parts.sections = drawn.figures, drawn.sections
            self._parts.notes += drawn.notes
        return self._parts

    def write(
        self,
        *,
        summary: Json | None = None,
        damaged: Sequence[int] = (),
        notify: Callable[[str], None] | None = None,
    ) -> Path:
        """Write ``report.html`` from the records fed, ``summary`` (else the one
        computed from the records when the feed was made to summarize them, else the
        run's ``summary.json``, read now) and ``config.toml`` (read now); returns its
        path. ``damaged``: the numbers of
        the lines of ``episodes.jsonl`` that were not records (a note on the page);
        ``notify`` hears each note. Raises ``OutputError`` when the page cannot be
        written (no temp file is left)."""
        run_dir, scan = self.run_dir, self.scan
        config_text = _text(run_dir / "config.toml", notify)
        try:
            config: Json = tomllib.loads(config_text)
        except tomllib.TOMLDecodeError:
            config = {}
        own = self.close(str(config.get("env_id") or "?"))
        note = _damaged_note(list(damaged))
        for line in ([note] if note else []) + own.notes:
            if notify is not None:
                notify(line)
        if summary is None and scan.summarize:
            if scan.summary.rollouts is None:
                scan.summary.rollouts = 1 + scan.max_rollout
            summary = scan.summary.result()
        elif summary is None:
            summary = _summary(run_dir / "summary.json", notify)
        if summary is None:
            raise ConfigError(
                f"report {run_dir}: summary.json is gone or damaged since the run wrote "
                "it; `taketurns report DIR` recomputes it from episodes.jsonl"
            )
        page = page_html(run_dir, scan, summary, config, config_text, note, own)
        out = run_dir / REPORT
        tmp = out.with_suffix(".tmp")
        try:
            tmp.write_text(page, encoding="utf-8")
            tmp.replace(out)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise OutputError(str(out), str(run_dir), exc) from None
        return out


def write_report(
    run_dir: Path,
    *,
    max_transcripts: int = MAX_TRANSCRIPTS,
    notify: Callable[[str], None] | None = None,
    env: Env | None = None,
) -> Path:
    """Write ``run_dir/report.html`` from the run's ``episodes.jsonl``, ``summary.json``
    (recomputed if missing) and ``config.toml``; returns the report's path. Every
    failed episode gets a transcript, and up to ``max_transcripts`` others (every
    episode counts in the plots, failed ones apart). The env's own figures and
    sections (``Env.report_figures``, ``Env.report_sections``) come from ``env``, or
    from the env ``config.toml`` names, built here. Damaged lines of
    ``episodes.jsonl`` are skipped, and an env part that cannot be drawn is left
    out: the page and ``notify`` get a one-line note for each. One pass over
    ``episodes.jsonl``, each record fed to a ``ReportFeed``.
    Raises ``OutputError`` when the page cannot be written (no temp file is left)."""
    run_dir = Path(run_dir)
    episodes_path = run_dir / "episodes.jsonl"
    if not episodes_path.is_file():
        raise ConfigError(
            f"report {run_dir}: no episodes.jsonl there; pass the -o directory of an eval"
        )
    try:
        config: Json = tomllib.loads(_text(run_dir / "config.toml", None))
    except tomllib.TOMLDecodeError:
        config = {}
    notes: list[str] = []
    if env is None:
        env, notes = env_from(config)
    rollouts = config.get("rollouts")
    summary = _summary(run_dir / "summary.json", notify)  # the eval's, when it is there
    feed = ReportFeed(
        run_dir,
        env=env,
        rollouts=rollouts if isinstance(rollouts, int) else None,
        summarize=summary is None,
        max_transcripts=max_transcripts,
        notes=notes,
    )
    damaged: list[int] = []
    try:
        for raw in read_episodes(episodes_path, damaged=damaged):
            feed.add(raw)
    finally:
        feed.close(str(config.get("env_id") or "?"))
    return feed.write(summary=summary, damaged=damaged, notify=notify)


def _text(path: Path, notify: Callable[[str], None] | None) -> str:
    """``path``'s text ("" when absent or unreadable); bytes that are not UTF-8 are
    shown replaced, and ``notify`` hears one line about it."""
    try:
        data = path.read_bytes() if path.is_file() else b""
    except OSError as exc:
        if notify is not None:
            notify(f"{path.name}: cannot be read ({exc.strerror or exc}); left out")
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if notify is not None:
            notify(
                f"{path.name}: not UTF-8 text (byte {exc.start}); shown with replacement characters"
            )
        return data.decode("utf-8", "replace")


def _summary(path: Path, notify: Callable[[str], None] | None) -> Json | None:
    """``summary.json`` as written by the eval, or None (recomputed) when it is
    absent or not a JSON object (``notify`` hears why)."""
    if not path.is_file():
        return None
    try:
        found = json.loads(_text(path, notify) or "null")
    except ValueError:
        found = None
    if not isinstance(found, dict):
        if notify is not None:
            notify(f"{path.name}: not a JSON object; recomputed from episodes.jsonl")
        return None
    return found


def _damaged_note(lines: list[int]) -> str:
    if not lines:
        return ""
    shown = ", ".join(str(n) for n in lines[:5]) + (" ..." if len(lines) > 5 else "")
    return (
        f"episodes.jsonl: skipped {len(lines)} damaged line{'s' if len(lines) > 1 else ''} "
        f"(line {shown}); `taketurns eval --resume -o DIR` sets them aside and reruns "
        "their pairs"
    )
