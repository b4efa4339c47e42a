"""Algorithm design: the op graph, the fusion plan and a first correct kernel."""
from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import EggContext
from nodes.design import design_step
from state import RunState


def algorithm_design(state: RunState, runtime: Runtime[EggContext]) -> dict:
    return design_step("algorithm_design", state, runtime)
