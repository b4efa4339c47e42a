"""Parallel mapping: block size, threads or warps per row, grid against SMs and occupancy."""
from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import EggContext
from nodes.design import design_step
from state import RunState


def parallel_mapping(state: RunState, runtime: Runtime[EggContext]) -> dict:
    return design_step("parallel_mapping", state, runtime)
