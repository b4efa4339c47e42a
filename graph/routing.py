"""Edges: read the state, never change it. The order of stages is state's STAGE_TABLE."""
from __future__ import annotations

from typing import Literal

from langgraph.types import Send

from state import NEXT_STAGE, RunState, StageName, VerifyTask


def after_analysis(state: RunState) -> Literal["algorithm_design", "finalize"]:
    return "finalize" if state.failure else "algorithm_design"


def dispatch(state: RunState) -> list[Send] | Literal["verification"]:
    """Fan the stage's candidates out to one verification task each."""
    if state.failure or not state.pending:
        return "verification"
    floor = state.analysis.roofline.floor_ms if state.analysis else None
    return [Send("verify_candidate", VerifyTask(candidate=state.candidate(cid), task_path=state.settings.task_path,
                                                task=state.task,
                                                settings=state.settings, floor_ms=floor, round=state.round))
            for cid in state.pending]


def after_verification(state: RunState) -> StageName | Literal["finalize"]:
    if state.failure:
        return "finalize"
    if not state.stage_done:
        return state.stage  # another round of the same stage
    return NEXT_STAGE[state.stage]
