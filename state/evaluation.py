"""What verification found out about one candidate."""
from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field


class Verdict(str, Enum):
    correct = "correct"
    compile_error = "compile_error"
    compiled_only = "compiled_only"  # compiled, but no GPU to run it: never counts
    incorrect = "incorrect"
    rejected = "rejected"  # a guard refused it (torch compute, side work, ...)
    crashed = "crashed"
    timed_out = "timed_out"


class CompileError(BaseModel):
    line: int | None = None
    message: str


class KernelResources(BaseModel):
    name: str
    registers: int | None = None
    shared_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0


class CompileResult(BaseModel):
    ok: bool
    backend: str  # "cupy", "nvrtc" or "nvcc"
    arch: str
    log: str = ""
    errors: list[CompileError] = Field(default_factory=list)
    resources: list[KernelResources] = Field(default_factory=list)
    seconds: float = 0.0
    cached: bool = False


class CorrectnessResult(BaseModel):
    passed: bool
    trials: int
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    detail: str = ""


class Timing(BaseModel):
    median_ms: float
    p10_ms: float
    p90_ms: float
    reps: int


class Evaluation(BaseModel):
    candidate_id: str
    stage: str
    verdict: Verdict
    reason: str = ""
    compile: CompileResult | None = None
    correctness: CorrectnessResult | None = None
    timing: Timing | None = None
    eager: Timing | None = None
    compiled: Timing | None = None  # torch.compile baseline, same process
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    roofline_fraction: float | None = None  # floor / measured
    flagged: str = ""  # e.g. faster than the roofline floor: not reported as a win
    guard_policy: str = "strict"
    aten_ops: list[str] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.correct and not self.flagged
