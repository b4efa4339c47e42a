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
    notes: list[str] = Field(default_factory=list)
