"""An OpenAI Agents SDK agent as a taketurns seat (the ``openai-agents`` harness).

    taketurns eval kuhn-poker --env.player0.harness=openai-agents \
        --env.player0.harness_options.agent=examples/agents_sdk_seat.py:make -n 20

``make`` is called once per rollout with the SDK model taketurns points at the
rollout's model endpoint and the rollout's tools as SDK function tools (none in Kuhn
poker; retail-lite's store tools under ``taketurns eval retail-lite``).
"""

from agents import Agent

INSTRUCTIONS = (
    "You are a careful agent. When the user offers bracketed options such as [check] "
    "[bet], answer with exactly one of them. Use your tools when they help."
)


def make(model, tools):
    return Agent(name="seat", instructions=INSTRUCTIONS, model=model, tools=tools)
