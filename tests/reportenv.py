"""``reportenv:WordsEnv``: a one-seat env with its own report figure and section (a
helper module for ``test_report_hooks``, run by reference, never registered).

Each episode asks the seat once and keeps ``info["word"]``: ``<b>word N</b>``, markup
that the report must show as text. ``hooks`` makes the report hooks misbehave:
``raises`` (``report_figures`` raises), ``wrong`` (``report_sections`` returns a
string, not ``Section`` values), ``first`` (``report_figures`` reads only the first
episode), ``sections-first`` (``report_sections`` reads only the first episode),
``sections-raises`` (``report_sections`` raises after reading the first episode).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import attrs

from taketurns import AgentConfig, Agents, Env, EnvConfig, Task
from taketurns.report import EpisodeView, Figure, Section, Series, bar_chart, table


@attrs.define
class WordsConfig(EnvConfig):
    player: AgentConfig = attrs.field(factory=AgentConfig)
    hooks: str = "ok"


class WordsEnv(Env):
    config_class = WordsConfig
    config: WordsConfig

    def tasks(self, num_tasks: int) -> list[Task]:
        return [Task(i, f"words-{i}", f"say word {i}") for i in range(num_tasks)]

    async def run(self, task: Task, agents: Agents) -> None:
        async with agents.player.chat(task) as session:
            await session.turn()
            session.trace.info["word"] = f"<b>word {task.idx % 2}</b>"

    def report_figures(self, episodes: Iterable[EpisodeView]) -> list[Figure]:
        if self.config.hooks == "raises":
            raise RuntimeError("the figure broke")
        if self.config.hooks == "first":
            episodes = [next(iter(episodes))]
        words = Counter(t.info["word"] for e in episodes for t in e.traces)
        names = sorted(words)
        series = [Series("episodes", tuple(float(words[n]) for n in names))]
        svg = bar_chart("plot-words", names, series, x_label="word", y_label="episodes")
        return [Figure("Words said", svg, note="one bar per word")]

    def report_sections(self, episodes: Iterable[EpisodeView]) -> Any:
        if self.config.hooks == "wrong":
            return "<p>not a section</p>"
        if self.config.hooks == "sections-first":
            episodes = [next(iter(episodes))]
        if self.config.hooks == "sections-raises":
            next(iter(episodes))
            raise RuntimeError("the section broke")
        rows = [(e.id, t.agent.name, t.info["word"]) for e in episodes for t in e.traces]
        html = table(["episode", "seat", "word"], rows, tag_column=1, mono=[2])
        return [Section("Words by episode", html, id="words"), Section("Again", html)]
