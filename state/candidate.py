"""A kernel candidate: CUDA source, host code and the knobs that made it."""
from __future__ import annotations

from pydantic import BaseModel, Field

Param = int | float | str | bool

# A candidate's cuda_source may be several compilation units, each whole (its own includes and helpers),
# separated by this line: a network's program compiles them in parallel (NVRTC, one thread each) and
# launches each kernel from the unit that defines it
MODULE_PART = "// ---- egg: a new compilation unit ----"


# The random draws a reference may make inside forward that a candidate's host code asks `egg.draw` for: the expert
# lowers them as leaves (agents/expert/opgraph.py), the verifier records and replays them (runtime/draws.py)
DRAW_OPS = ("randn", "rand", "randn_like", "rand_like")
# A Dropout's keep mask in training mode is such a draw too, recorded as a "dropout" draw of its 0/1 values: eager draws
# it inside `native_dropout` on the GPU (its second output), by `bernoulli_(1 - p)` on a fresh tensor on the CPU (and
# for a channel-wise Dropout2d/3d)
MASK_OPS = ("native_dropout", "bernoulli")


def module_parts(source: str) -> list[str]:
    """The compilation units of a candidate's source (one where it has no MODULE_PART line)."""
    return source.split("\n" + MODULE_PART + "\n")


class KernelCandidate(BaseModel):
    id: str
    stage: str
    parent_id: str | None = None
    cuda_source: str
    # Python source defining `ModelNew(torch.nn.Module)`; it reaches the compiled
    # module and launch helpers through the injected global `egg` (runtime/kernel_api.py).
    host_code: str
    kernel_names: list[str]
    params: dict[str, Param] = Field(default_factory=dict)
    compile_options: list[str] = Field(default_factory=list)
    description: str = ""
    family: str = ""  # e.g. "pointwise", "row_reduction", "gemm"
    guard_policy: str = "strict"  # "strict" or "mixed" (see shared/NOTES.md)
    # the FLOPs of the kernel's own algorithm where an algebraic rewrite does less arithmetic than the
    # reference (a matmul or conv summed before it is computed): the verifier then holds it to the
    # floor of these FLOPs and the bytes every correct kernel moves, not to the reference's FLOPs
    algorithm_flops: float | None = None
