"""An env for the worker backends' tests (Ray, processes): a chosen task kills the
worker process running it (``os._exit``), once or every time; episodes can hang, the
env's setup can fail, and episodes can print to stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs
import trio

from taketurns import AgentConfig, Agents, ConfigError, Env, EnvConfig, Task


@attrs.define
class CrashConfig(EnvConfig):
    player: AgentConfig = attrs.field(factory=AgentConfig)
    marker: str = ""  # a file: the worker that creates it dies (once, or always)
    log: str = ""  # each finished (hanging: started) episode appends "idx pid"
    crash_task: int = 12
    always: bool = False
    hang: bool = False
    setup_error: str = ""  # "config": setup raises ConfigError; "bug": a RuntimeError
    chatter: bool = False  # each episode prints lines to stdout
    orphan: str = ""  # before dying, start a sleeping process with this in its environment


class CrashOnce(Env):
    """Task ``crash_task`` kills its worker process (``os._exit``): the first time
    only, or every time with ``always``."""

    id = "crash-once"
    config_class = CrashConfig
    config: CrashConfig

    def tasks(self, num_tasks: int) -> Sequence[Task]:
        return [Task(idx=i, prompt=f"choose [left] or [right] #{i}") for i in range(num_tasks)]

    async def setup(self) -> None:
        if self.config.setup_error == "config":
            raise ConfigError("env.data = 'missing.jsonl': no such file")
        if self.config.setup_error == "bug":
            raise RuntimeError("the word list is empty")

    async def run(self, task: Task, agents: Agents) -> None:
        if self.config.chatter:  # as TextArena's WordSearch does
            print(f"E[{task.idx}, 0, {{}}]\tnot a result\nX{{}}", flush=True)
        if self.config.hang:
            if self.config.log:
                _log(self.config.log, task.idx)  # started
            await trio.sleep_forever()
        await trio.sleep(0.05)
        if task.idx == self.config.crash_task:
            _crash(self.config)
        await agents.player.run(task)
        if self.config.log:
            _log(self.config.log, task.idx)


def _crash(config: CrashConfig) -> None:
    marker = Path(config.marker)
    if config.always or not marker.exists():
        with marker.open("a") as f:
            f.write(f"{os.getpid()}\n")
        if config.orphan:  # as a harness's program would be, mid-segment
            sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
            subprocess.Popen(sleeper, env={**os.environ, config.orphan: "1"})
        os._exit(1)


def _log(path: str, idx: int) -> None:
    with open(path, "a") as f:
        f.write(f"{idx} {os.getpid()}\n")
