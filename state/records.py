"""Inter-stage design record and intra-stage attempt log."""
from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

from state.candidate import Param

# The one stage table: routing, the builder and the reports derive from it, in this order.
STAGE_TABLE: dict[str, str] = {
    "algorithm_design": "the op graph, the fusion plan and a first correct kernel",
    "parallel_mapping": "threads, warps and blocks over the output (block size, mapping, warp tiles)",
    "tiling": "tile shapes and items per thread",
    "memory_optimization": "vector widths, shared-memory staging and padding, pipelining",
}
StageName = Literal["algorithm_design", "parallel_mapping", "tiling", "memory_optimization"]
STAGES: list[str] = list(STAGE_TABLE)
TUNING_STAGES = STAGES[1:]
NEXT_STAGE: dict[str, str] = dict(zip(STAGES, STAGES[1:] + ["finalize"]))
assert STAGES == list(get_args(StageName))


class Budget(BaseModel):
    candidates_per_stage: int = Field(4, ge=1)
    total_candidates: int = Field(40, ge=1)
    algorithm_rounds: int = Field(3, ge=1)  # bounded retries until a correct kernel
    tuning_rounds: int = Field(1, ge=1)


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

