"""Inter-stage design record and intra-stage attempt log."""
from __future__ import annotations

from pydantic import BaseModel, Field

from state.candidate import Param

STAGES = ["algorithm_design", "parallel_mapping", "tiling", "memory_optimization"]
TUNING_STAGES = STAGES[1:]


class Budget(BaseModel):
    candidates_per_stage: int = 4
    total_candidates: int = 40
    algorithm_rounds: int = 3  # bounded retries until a correct kernel
    tuning_rounds: int = 1


class StageAttempt(BaseModel):
    """One line of the intra-stage log: what was tried and what came of it."""
    stage: str
    round: int
    candidate_id: str
    params: dict[str, Param] = Field(default_factory=dict)
    verdict: str
    reason: str = ""
    median_ms: float | None = None
    compile_errors: list[str] = Field(default_factory=list)


class StageDecision(BaseModel):
    stage: str
    chosen_id: str | None
    params: dict[str, Param] = Field(default_factory=dict)
    best_ms: float | None = None
    input_ms: float | None = None  # the best time when the stage began
    improved: bool = False
    candidates_tried: int = 0
    note: str = ""


class DesignRecord(BaseModel):
    """Decisions so far and the best kernel: what each later stage starts from."""
    decisions: list[StageDecision] = Field(default_factory=list)
    best_id: str | None = None
    best_ms: float | None = None
    plan: str = ""  # the algorithm stage's plan, in words

