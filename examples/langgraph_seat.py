"""A LangGraph graph as a taketurns seat (the ``langgraph`` harness): a model node and,
when the rollout has tools, a tool node in a loop (the ReAct shape).

    taketurns eval kuhn-poker --env.player0.harness=langgraph \
        --env.player0.harness_options.agent=examples/langgraph_seat.py:make -n 20

``make`` is called once per rollout with the ``ChatOpenAI`` taketurns points at the
rollout's model endpoint and the rollout's tools as langchain tools; the graph's
checkpointer keeps the conversation from one turn to the next.
"""

from langchain_core.messages import SystemMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

INSTRUCTIONS = (
    "You are a careful agent. When the user offers bracketed options such as [check] "
    "[bet], answer with exactly one of them. Use your tools when they help."
)


def make(model, tools):
    llm = model.bind_tools(tools) if tools else model

    async def agent(state: MessagesState) -> dict:
        reply = await llm.ainvoke([SystemMessage(INSTRUCTIONS), *state["messages"]])
        return {"messages": [reply]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    if tools:
        builder.add_node("tools", ToolNode(tools))
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
    else:
        builder.add_edge("agent", END)
    return builder.compile(checkpointer=InMemorySaver())
