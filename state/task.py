"""The task being optimized and what analysis learned about it."""
from __future__ import annotations

from pydantic import BaseModel, Field


class TensorSpec(BaseModel):
    shape: list[int]
    dtype: str  # torch dtype name without the prefix, e.g. "float32"

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


class TaskSpec(BaseModel):
    """A KernelBench-format file: `Model`, `get_inputs`, `get_init_inputs`."""
    path: str
    name: str
    source_sha256: str
    source: str = ""  # the task file as analysis read it: later nodes, agents and the worker use this copy


class Roofline(BaseModel):
    flops: float
    bytes_moved: float  # each input read once, each output written once
    bound: str  # "memory" or "compute"
    floor_ms: float  # the time no kernel can beat on this profile
    peak_flops: float
    bandwidth_bytes_s: float

    def floor_for(self, algorithm_flops: float | None) -> float:
        """The floor for a kernel that declares its own FLOPs (an algebraic rewrite): those at the peak
        or the bytes every correct kernel moves, whichever is longer; never above the reference's floor."""
        if algorithm_flops is None:
            return self.floor_ms
        return min(self.floor_ms, max(self.bytes_moved / self.bandwidth_bytes_s,
                                      algorithm_flops / self.peak_flops) * 1e3)


TF32_GRADE = 1e-5  # a norm-wise error above this is TF32's (10-bit mantissa) rather than fp32's
TF32_RISE = 4.0  # eager's error this many times its error with TF32 off: it ran TF32


def eager_ran_tf32(eager_err: float | None, exact_err: float | None = None) -> bool | None:
    """Whether eager's measured error is TF32's (its cuDNN ran TF32), None where it was not measured. With
    eager's error at TF32 off measured too, whether TF32 raised it: a reduction after the conv (a pool, a
    logsumexp) averages TF32's error down to a few 1e-6, below any fixed line (level 2 tasks 43, 50, 58:
    3e-6 to 4e-6 against exact fp32's 1e-8 to 5e-7). Else the fixed line. An error of exactly 0 says nothing
    of the algorithm (the output does not depend on the rounding): not fp32 grade."""
    if eager_err is None:
        return None
    if eager_err == 0.0:
        return True
    if exact_err is not None:
        return eager_err > TF32_RISE * max(exact_err, 1e-12)
    return eager_err > TF32_GRADE


class TaskAnalysis(BaseModel):
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    ops: list[str] = Field(default_factory=list)  # aten/fx op names in order, for reports
    roofline: Roofline
    eager_ms: float | None = None  # None where no GPU was present
    compile_ms: float | None = None
    device: str = "cpu"
    # eager's own norm-wise error vs float64 where it may run reduced precision (cuDNN TF32): measured,
    # since cuDNN picks exact fp32 algorithms for many shapes, and then a TF32 candidate cannot pass
    eager_err: float | None = None
    eager_exact_err: float | None = None  # the same with TF32 off (cudnn.allow_tf32 False): eager_ran_tf32
    notes: list[str] = Field(default_factory=list)
