"""What an env author needs beyond ``taketurns`` (issue 41: one door per audience; a
harness author's is ``taketurns.harness``, a taskset author's ``taketurns.taskset``):

- the model contract: ``ModelClient`` (``complete(ModelRequest) -> ModelResponse``),
  ``Usage``; a scripted policy of the env's own served as ``builtin/<name>``:
  ``register_builtin_policy``; ``PolicyProbe`` (an env whose policy ``taketurns
  exploitability`` measures state by state)
- what a trace records, for an env that reads its seats' traces: ``Turn``,
  ``TurnReward``, ``JudgeCall``, ``AgentStamp``, ``EpisodeInfo``
- running an env: ``roles_of`` (its agent fields), the ``env_registry``
- option checks for config fields: ``at_least``, ``int_between``, ``one_of``

Messages in detail, tools and MCP servers, ``run_asyncio`` (asyncio-only libraries
inside an episode: what both an env and a harness build with) are in
``taketurns.harness``; the errors in ``taketurns.errors``. ``taketurns.env.run_asyncio``
still resolves, to the same function, for code written when it lived here.
"""

import typing

from taketurns._config.options import at_least, int_between, one_of
from taketurns._config.registry import envs as env_registry
from taketurns._eval.env import roles_of
from taketurns._eval.probe import PolicyProbe
from taketurns._exchange.trace import AgentStamp, EpisodeInfo, JudgeCall, Turn, TurnReward, Usage
from taketurns._models.builtin import register_policy as register_builtin_policy
from taketurns._models.model import ModelClient, ModelRequest, ModelResponse

if typing.TYPE_CHECKING:  # the kept name below, for type checkers
    from taketurns._eval.aio import run_asyncio as run_asyncio


def __getattr__(name: str) -> object:
    if name != "run_asyncio":  # its home is taketurns.harness
        raise AttributeError(f"module 'taketurns.env' has no attribute {name!r}")
    from taketurns._eval.aio import run_asyncio

    return run_asyncio


__all__ = [
    "AgentStamp",
    "EpisodeInfo",
    "JudgeCall",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "PolicyProbe",
    "Turn",
    "TurnReward",
    "Usage",
    "at_least",
    "env_registry",
    "int_between",
    "one_of",
    "register_builtin_policy",
    "roles_of",
]
