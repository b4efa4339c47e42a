"""Tiling: items per thread, GEMM block/warp/thread tiles, split-K."""
from __future__ import annotations

from langgraph.runtime import Runtime

from graph.context import EggContext
from nodes.design import design_step
from state import RunState


def tiling(state: RunState, runtime: Runtime[EggContext]) -> dict:
    return design_step("tiling", state, runtime)
