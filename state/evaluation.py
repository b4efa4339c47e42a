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
    out_of_memory = "out_of_memory"  # the evaluation did not fit on the device: neither right nor wrong


class CompileError(BaseModel):
    line: int | None = None
    message: str


class KernelResources(BaseModel):
    name: str
    registers: int | None = None
    shared_bytes: int = 0  # static, from the compiler
    dynamic_shared_bytes: int = 0  # the most a launch asked for (known once it ran: the evaluator fills it)
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0

    @property
    def shared_total(self) -> int:
        """A block's shared memory, static and dynamic."""
        return self.shared_bytes + self.dynamic_shared_bytes


class CompileResult(BaseModel):
    ok: bool
    backend: str  # "cupy", "nvrtc" or "nvcc"
    arch: str
    log: str = ""
    errors: list[CompileError] = Field(default_factory=list)
    resources: list[KernelResources] = Field(default_factory=list)
    seconds: float = 0.0
    cached: bool = False


class OutputError(BaseModel):
    """One floating output of one trial, measured against the truth (float64 unless `truth` says not)."""
    trial: str  # "task seed 123" or "widened seed 124"
    output: int = 0
    cand_norm: float  # ||cand - truth|| / ||truth||
    eager_norm: float  # the same for PyTorch eager's own result
    cand_max: float  # max |cand - truth| / max |truth|
    eager_max: float


class CorrectnessResult(BaseModel):
    passed: bool
    trials: int
    rule: str = "float64"  # "float64": error within a multiple of eager's own; "kernelbench": allclose vs eager
    truth: str = ""  # where the truth came from: "float64 on cuda", "float64 on cpu", "eager (...)"
    errors: list[OutputError] = Field(default_factory=list)
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    atol: float | None = None
    rtol: float | None = None
    note: str = ""  # e.g. eager runs TF32 convolutions (torch's default), so the candidate had the same room
    detail: str = ""
    nan_trial: str = ""  # the float64 rule's NaN trial: "passed", "failed: why", "skipped: why" ("" not run)

    @property
    def worst(self) -> OutputError | None:
        return max(self.errors, key=lambda e: e.cand_norm, default=None)


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
    peak_bytes: int | None = None  # device memory peak of the whole evaluation
    eager_peak_bytes: int | None = None  # eager's own peak on the task (the memory plan's yardstick)
    timing_cost_s: float | None = None  # wall time spent timing this candidate (fresh inputs, checks)
    # a program's kernels (its regions), each its median time within a call, in launch order
    kernel_ms: dict[str, float] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.correct and not self.flagged
