"""What the expert makes of a profile: which of a stage's variants to try first. The knobs a stage
may touch stay the stage's own; the profile of the kernel the stage starts from only orders them, so
a small candidate budget is spent where the hardware says the time goes."""
from __future__ import annotations

from state import KernelProfile

LOW_OCCUPANCY = 25.0  # % of the SM's warp slots


def _warps(v: dict) -> int:
    return v.get("WM", 1) * v.get("WN", 1)


def order(fam: str, stage: str, variants: list[dict], prof: KernelProfile | None) -> tuple[list[dict], str]:
    """`variants` with the most promising first, and why ('' when the profile says nothing here)."""
    if prof is None or not prof.available or not variants:
        return variants, ""
    lim = prof.limiter
    occ = prof.achieved_occupancy_pct
    key, why = None, ""
    tc_gemm = fam == "gemm" and any("WM" in v for v in variants)
    if lim == "latency" and occ is not None and occ < LOW_OCCUPANCY:
        if stage == "parallel_mapping" and tc_gemm:
            key, why = (lambda v: -_warps(v)), "more warps first"
        elif stage == "parallel_mapping" and any("block" in v for v in variants):
            key, why = (lambda v: -v.get("block", 0)), "larger blocks first"
        elif stage == "memory_optimization" and fam == "gemm":
            key, why = (lambda v: (-v.get("stages", 0), not v.get("ldm", False))), "deeper cp.async rings first"
        elif stage == "tiling" and tc_gemm:
            key, why = (lambda v: v.get("BM", 0) * v.get("BN", 0)), "smaller tiles (more blocks an SM) first"
        why = why and f"latency-bound at {occ:.0f}% occupancy: {why}"
    elif lim == "memory":
        if stage == "memory_optimization" and any("vec" in v for v in variants):
            key, why = (lambda v: -(v.get("vec") or 16)), "memory-bound: the widest vectors first"
        elif stage == "tiling" and fam == "gemm":
            key, why = (lambda v: -(v.get("BM", 0) * v.get("BN", 0))), "memory-bound: the largest tiles (most reuse) first"
    elif lim == "compute" and fam == "gemm" and stage == "memory_optimization" and prof.busiest_pipe.upper() in ("ALU", "LSU"):
        key, why = (lambda v: not v.get("ldm", False)), f"{prof.busiest_pipe} pipe busiest: fewer load instructions (ldmatrix) first"
    if key is None:
        return variants, ""
    return sorted(variants, key=key), why
