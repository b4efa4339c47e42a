"""The StateGraph: analysis, four design stages each followed by verification, finalize.

`langgraph dev` / Studio load `graph` (compiled without a checkpointer: the server
brings its own); the runner compiles with SQLite through `build(checkpointer)`.
"""
from __future__ import annotations

from langgraph.graph import END, START, StateGraph
from langgraph.types import RetryPolicy

from context import EggContext
from graph.routing import after_analysis, after_verification, dispatch
from nodes.analysis import analysis
from nodes.design import design_node
from nodes.finalize import finalize
from nodes.verification import verification, verify_candidate
from runtime.sandbox import WorkerSetupError
from state import NEXT_STAGE, STAGES, RunState, VerifyTask

DESIGN_NODES = {name: design_node(name) for name in STAGES}
# a worker that could not start (driver hiccup, out of memory at setup) is worth one more try
INFRA_RETRY = RetryPolicy(max_attempts=2, retry_on=WorkerSetupError)


def builder() -> StateGraph:
    b = StateGraph(RunState, context_schema=EggContext)
    b.add_node("analysis", analysis, retry_policy=INFRA_RETRY)
    for name, fn in DESIGN_NODES.items():
        b.add_node(name, fn)
    b.add_node("verify_candidate", verify_candidate, input_schema=VerifyTask, retry_policy=INFRA_RETRY)
    b.add_node("verification", verification)
    b.add_node("finalize", finalize)
    b.add_edge(START, "analysis")
    b.add_conditional_edges("analysis", after_analysis, ["algorithm_design", "finalize"])
    for name in STAGES:
        b.add_conditional_edges(name, dispatch, ["verify_candidate", "verification"])
    b.add_edge("verify_candidate", "verification")
    b.add_conditional_edges("verification", after_verification, [*STAGES, *set(NEXT_STAGE.values())])
    b.add_edge("finalize", END)
    return b


def build(checkpointer=None):
    return builder().compile(checkpointer=checkpointer, name="egg")


graph = build()
