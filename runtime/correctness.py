"""Compare a candidate's outputs with the reference's: dtype- and scale-aware, NaN-proof."""
from __future__ import annotations

import torch

# (atol, rtol): KernelBench's levels; atol is scaled by the reference's magnitude below
TOLERANCES = {
    torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2), torch.bfloat16: (2e-2, 2e-2),
}
# the norm-wise relative error ||out - ref|| / ||ref|| must also stay under this
NORM_TOL = {torch.float32: 1e-5, torch.float64: 1e-10, torch.float16: 5e-3, torch.bfloat16: 1e-2}


def as_list(out) -> list:
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


def compare(out, ref) -> tuple[bool, str, float, float, float, float]:
    """Returns (passed, detail, max_abs_err, max_rel_err, atol, rtol) over all outputs."""
    outs, refs = as_list(out), as_list(ref)
    if len(outs) != len(refs):
        return False, f"returned {len(outs)} outputs, reference returns {len(refs)}", 0, 0, 0, 0
    worst_abs = worst_rel = 0.0
    atol = rtol = 0.0
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(r, torch.Tensor):
            if o != r:
                return False, f"output {i}: {o!r} != {r!r}", 0, 0, 0, 0
            continue
        if not isinstance(o, torch.Tensor):
            return False, f"output {i} is {type(o).__name__}, not a tensor", 0, 0, 0, 0
        if o.shape != r.shape:
            return False, f"output {i} shape {tuple(o.shape)} != {tuple(r.shape)}", 0, 0, 0, 0
        if o.dtype != r.dtype:
            return False, f"output {i} dtype {o.dtype} != {r.dtype}", 0, 0, 0, 0
        if o.device != r.device:
            return False, f"output {i} on {o.device}, reference on {r.device}", 0, 0, 0, 0
        if not r.is_floating_point():
            bad = (o != r).sum().item()
            if bad:
                return False, f"output {i}: {bad} of {r.numel()} elements differ", 0, 0, 0, 0
            continue
        of, rf = o.double(), r.double()
        ref_finite = torch.isfinite(rf)
        if not torch.equal(torch.isfinite(of), ref_finite) or not torch.equal(torch.isnan(of), torch.isnan(rf)):
            n = (~torch.isfinite(of) & ref_finite).sum().item()
            return False, f"output {i}: {n} NaN/Inf where the reference is finite (unwritten or overflowed)", 0, 0, 0, 0
        a0, r0 = TOLERANCES.get(r.dtype, (1e-4, 1e-4))
        scale = max(1.0, rf[ref_finite].abs().max().item() if ref_finite.any() else 1.0)
        atol, rtol = a0 * scale, r0
        diff = (of - rf).abs()
        diff = torch.where(ref_finite, diff, torch.zeros_like(diff))  # matching Infs/NaNs agree
        worst_abs = max(worst_abs, diff.max().item() if diff.numel() else 0.0)
        rel = diff / rf.abs().clamp_min(1e-30)
        worst_rel = max(worst_rel, rel[ref_finite].max().item() if ref_finite.any() else 0.0)
        bad = diff > atol + rtol * rf.abs()
        if bad.any():
            j = int(bad.flatten().nonzero()[0])
            return (False, f"output {i}: {int(bad.sum())} of {r.numel()} elements off; first at flat index {j}: "
                    f"got {of.flatten()[j].item():.6g}, want {rf.flatten()[j].item():.6g}",
                    worst_abs, worst_rel, atol, rtol)
        rn = torch.linalg.vector_norm(rf[ref_finite]).item()
        if rn > 0:
            nrel = torch.linalg.vector_norm(diff[ref_finite]).item() / rn
            if nrel > NORM_TOL.get(r.dtype, 1e-5):
                return False, f"output {i}: norm-wise relative error {nrel:.2e}", worst_abs, worst_rel, atol, rtol
        if r.numel() > 1 and rf.std().item() > 0 and of.std().item() == 0:
            return False, f"output {i} is constant while the reference varies", worst_abs, worst_rel, atol, rtol
    return True, "", worst_abs, worst_rel, atol, rtol


def degenerate_input(t) -> bool:
    """An input that hides bugs: all zeros (or constant) floating data."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1 and bool((t == t.flatten()[0]).all())
