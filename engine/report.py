"""Building blocks for an env's own part of its runs' report.

An env adds figures to the report's Plots grid (``Env.report_figures``) and
sections of its own after them (``Env.report_sections``); both hooks read the run's
episodes and return these values, drawn with these helpers::

    from taketurns.report import Figure, Series, bar_chart

    class MyEnv(Env):
        def report_figures(self, episodes):
            wins = Counter(t.agent.name for e in episodes if e.ok for t in e.traces
                           if t.info.get("won"))
            names = sorted(wins)
            svg = bar_chart("plot-wins", names, [Series("wins", tuple(
                float(wins[n]) for n in names))], x_label="agent", y_label="episodes won")
            return [Figure("Wins per agent", svg)]

The hooks get each episode as an ``EpisodeView``: the record read back from
``episodes.jsonl``, answering ``id``, ``ok``, ``task``, ``rollout``, ``traces`` (each
trace's ``agent``, ``info``, ``rewards``, ``reward``, ``metrics``, ``last_text``) from
the parsed JSON; any other ``Episode``/``Trace`` attribute structures the record on
first use (a hook that reads every trace's ``turns`` pays for them).

Everything here escapes what it is given; markup an env writes itself must escape
every value read from an episode with ``esc`` (episode content is untrusted).
"""

from taketurns._report.charts import Series, bar_chart, histogram
from taketurns._report.episode_view import EpisodeView, TraceView
from taketurns._report.markup import details, esc, num, table
from taketurns._report.parts import Figure, Section

__all__ = [
    "EpisodeView",
    "Figure",
    "Section",
    "Series",
    "TraceView",
    "bar_chart",
    "details",
    "esc",
    "histogram",
    "num",
    "table",
]
