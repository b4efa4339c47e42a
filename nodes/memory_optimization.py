"""Memory optimization: vector loads, shared-memory staging, register caching, cp.async."""
from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import EggContext
from nodes.design import design_step
from state import RunState


def memory_optimization(state: RunState, runtime: Runtime[EggContext]) -> dict:
    return design_step("memory_optimization", state, runtime)
