"""Edges: read the state, never change it."""
from __future__ import annotations

from langgraph.types import Send

from state import RunState, VerifyTask

NEXT_STAGE = {"algorithm_design": "parallel_mapping", "parallel_mapping": "tiling",
              "tiling": "memory_optimization", "memory_optimization": "finalize"}


def after_analysis(state: RunState) -> str:
    return "finalize" if state.failure else "algorithm_design"


def dispatch(state: RunState) -> list[Send] | str:
    """Fan the stage's candidates out to one verification task each."""
    if state.failure or not state.pending:
        return "verification"
    floor = state.analysis.roofline.floor_ms if state.analysis else None
    return [Send("verify_candidate", VerifyTask(candidate=state.candidate(cid), task_path=state.settings.task_path,
                                                settings=state.settings, floor_ms=floor, round=state.round))
            for cid in state.pending]


def after_verification(state: RunState) -> str:
    if state.failure:
        return "finalize"
    if not state.stage_done:
        return state.stage  # another round of the same stage
    return NEXT_STAGE[state.stage]
