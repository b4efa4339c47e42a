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


class TaskAnalysis(BaseModel):
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    ops: list[str] = Field(default_factory=list)  # aten/fx op names in order, for reports
    roofline: Roofline
    eager_ms: float | None = None  # None where no GPU was present
    compile_ms: float | None = None
    device: str = "cpu"
    notes: list[str] = Field(default_factory=list)
