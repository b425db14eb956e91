"""A Pydantic AI agent as a taketurns seat (the ``pydantic-ai`` harness).

    taketurns eval kuhn-poker --env.player0.harness=pydantic-ai \
        --env.player0.harness_options.agent=examples/pydantic_ai_seat.py:make -n 20

``make`` is called once per rollout with the pydantic-ai model taketurns points at the
rollout's model endpoint and the rollout's tools as pydantic-ai tools.
"""

from pydantic_ai import Agent

INSTRUCTIONS = (
    "You are a careful agent. When the user offers bracketed options such as [check] "
    "[bet], answer with exactly one of them. Use your tools when they help."
)


def make(model, tools):
    return Agent(model, instructions=INSTRUCTIONS, tools=tools)
