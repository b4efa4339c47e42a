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
    roof = state.analysis.roofline if state.analysis else None
    sends = []
    for cid in state.pending:
        c = state.candidate(cid)
        sends.append(Send("verify_candidate", VerifyTask(candidate=c, task_path=state.settings.task_path, task=state.task,
                                                         settings=state.settings, round=state.round,
                                                         floor_ms=roof.floor_for(c.algorithm_flops) if roof else None)))
    return sends


def after_verification(state: RunState) -> StageName | Literal["finalize"]:
    if state.failure:
        return "finalize"
    if not state.stage_done:
        return state.stage  # another round of the same stage
    return NEXT_STAGE[state.stage]
