"""The example of docs/writing-envs.md: two agents trade lines for a few rounds.

Run it without packaging it:

    taketurns eval ./examples/duel.py:Duel -n 3
"""

from collections import Counter

import attrs

from taketurns import AgentConfig, Env, EnvConfig, Task, reward
from taketurns.report import Figure, Section, Series, bar_chart, table


@attrs.define
class DuelConfig(EnvConfig):
    left: AgentConfig = attrs.field(factory=AgentConfig)
    right: AgentConfig = attrs.field(factory=AgentConfig)
    rounds: int = 3


class Duel(Env):
    config_class = DuelConfig

    def tasks(self, num_tasks):
        return [Task(idx=i, prompt=f"Open round {i}") for i in range(num_tasks)]

    async def run(self, task, agents):
        async with (
            agents.left.chat(task) as left,
            agents.right.chat(task, mask_prompt=True) as right,
        ):
            reply = await left.turn()
            for _ in range(self.config.rounds):
                reply = await right.turn(reply.text)
                if reply.stopped:
                    break
                reply = await left.turn(reply.text)
                if reply.stopped:
                    break

    @reward
    def spoke(self, task, trace):
        return float(bool(trace.last_text))

    # its own part of report.html (docs/writing-envs.md: "Its own part of the report")
    def report_figures(self, episodes):
        spoke = Counter(t.agent.name for e in episodes if e.ok for t in e.traces if t.last_text)
        names = sorted(spoke)
        series = [Series("traces", tuple(float(spoke[n]) for n in names))]
        svg = bar_chart("plot-spoke", names, series, x_label="side", y_label="traces")
        return [Figure("Who spoke last", svg)]

    def report_sections(self, episodes):
        rows = [(e.id, t.agent.name, t.last_text) for e in episodes for t in e.traces]
        return [Section("Last words", table(["episode", "side", "text"], rows, tag_column=1))]
