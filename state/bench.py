"""Records of a suite run (`egg bench`): one per task, and the summary."""
from __future__ import annotations

from pydantic import BaseModel, Field


class TaskResult(BaseModel):
    task: str  # path relative to the suite root, e.g. level1/03_gelu
    thread_id: str
    status: str  # verified, unverified, failed, unsupported, error
    message: str = ""
    correct: bool = False
    eager_ms: float | None = None
    compile_ms: float | None = None
    egg_ms: float | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    roofline_fraction: float | None = None
    bound: str | None = None
    floor_ms: float | None = None
    guard_policy: str | None = None
    family: str | None = None  # the kernel family when verified, else the task's operator family
    cand_err: float | None = None  # worst norm-wise error vs float64 over the trials (float64 rule)
    eager_err: float | None = None  # eager's own on the same trials
    peak_ratio: float | None = None  # the evaluation's device-memory peak over eager's own
    design: str | None = None  # the best candidate's description (its algorithm, tile, pipeline)
    profile: str | None = None  # its Nsight Compute summary where a stage profiled it (None with --no-profile or no ncu)
    stage_best_ms: dict[str, float | None] = Field(default_factory=dict)
    kernel_ms: dict[str, float] = Field(default_factory=dict)  # a program's kernels, each one's time within a call
    kernel_path: str | None = None
    wall_s: float | None = None  # this session's wall time on the task (None when it came from a checkpoint)
    device: str | None = None
    host: str | None = None  # where it ran (a Ray bench)


class BenchSummary(BaseModel):
    tasks: int
    correct: int
    correctness_rate: float
    fast_p_eager: dict[str, float]
    fast_p_compile: dict[str, float]
    geomean_speedup_eager: float | None
    geomean_speedup_compile: float | None
    by_policy: dict[str, int] = Field(default_factory=dict)


class BenchResults(BaseModel):
    date: str
    device: str
    commit: str
    agent: str
    results: list[TaskResult]
    summary: BenchSummary
    wall_s: float | None = None  # the whole bench, this session (a resumed bench counts only what it ran)
    slots: int = 1  # tasks run at a time (GPUs, for a Ray bench)
    tolerance: str = "float64"  # which correctness rule produced these verdicts (see runtime/correctness.py)
