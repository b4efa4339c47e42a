"""Is a candidate's output right? Measured against a float64 truth, in chunks (no full-size
float64 temporaries on the device), and judged against PyTorch eager's own error.

The float64 rule (default): for every floating output, the candidate's norm-wise error
||c - t|| / ||t|| and its max error max|c - t| / max|t| must each be at most RULE_MULTIPLE times
eager's own error on the same inputs, or under a floor of a few units of the output dtype's
rounding (exact outputs, where eager's error is ~0). Measured (tests/test_correctness_rule.py and
the H200 KernelBench run): a plain sequential fp32 sum over 4096 terms lands at 14-19x eager's
cascaded sums, a two-level sum over 10^6 terms at 9x; TF32 or fp16 arithmetic on an fp32 matmul
that eager computes in fp32 lands at 1000-5000x, and rounding through bf16 at 6000x+. 32x sits
in that gap.

The kernelbench rule: KernelBench's own `torch.allclose(out, eager, atol=rtol=1e-4 fp32 /
1e-2 fp16, bf16)`, chunked, so figures can sit beside published ones.

Both: shape, dtype, device, a plain torch.Tensor (no lazy subclass), integer outputs exactly
equal to eager's, NaN/Inf where the truth is finite rejected, a constant output where the
truth varies rejected.
"""
from __future__ import annotations

import contextlib
import copy
import math
import types
from dataclasses import dataclass

import torch

RULE_MULTIPLE = 32.0
EPS = {torch.float32: 2.0 ** -23, torch.float64: 2.0 ** -52, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}
FLOOR_NORM_EPS = 2.0  # the floors, in units of the output dtype's epsilon
FLOOR_MAX_EPS = 4.0
KERNELBENCH_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2, torch.float64: 1e-4}
CHUNK = 1 << 22  # elements per comparison chunk at most: 32 MiB a float64 temporary


def copy_model(model: torch.nn.Module) -> torch.nn.Module:
    """A deep copy whose functions stored on its modules close over the copy's own objects: deepcopy
    shares functions, so minGPT's `self.mlpf = lambda x: m.c_proj(...)` (KernelBench level 3, 44) in the
    copy called the original's layers, and converting the copy to float64 broke it."""
    memo: dict = {}
    new = copy.deepcopy(model, memo)
    for m in new.modules():
        for k, v in list(vars(m).items()):
            if isinstance(v, types.FunctionType) and v.__closure__:
                cells = []
                for c in v.__closure__:
                    try:
                        cells.append(types.CellType(memo.get(id(c.cell_contents), c.cell_contents)))
                    except ValueError:  # an empty cell
                        cells.append(types.CellType())
                f = types.FunctionType(v.__code__, v.__globals__, v.__name__, v.__defaults__, tuple(cells))
                f.__kwdefaults__ = v.__kwdefaults__
                setattr(m, k, f)
    return new


def in_float64(model: torch.nn.Module, device=None) -> torch.nn.Module:
    """The reference model for the float64 truth: parameters, buffers and plain floating tensor
    attributes (an RNN's initial state kept as `self.h0`, which `.to(dtype)` leaves alone) in float64."""
    model = model.to(device=device, dtype=torch.float64)
    for m in model.modules():
        for k, v in list(vars(m).items()):
            if isinstance(v, torch.Tensor) and not isinstance(v, torch.nn.Parameter) and v.is_floating_point():
                setattr(m, k, v.to(device=device or v.device, dtype=torch.float64))
    return model


def chunk_for(n: int, chunk: int | None = None) -> int:
    """A chunk of about 1/16 of the tensor (so temporaries stay small beside it), within [256K, CHUNK]."""
    return chunk or max(1 << 18, min(CHUNK, n // 16))


@contextlib.contextmanager
def no_tf32(cudnn: bool = True):
    """fp32 arithmetic as written: no TF32 in matmuls or cuDNN, and with `cudnn=False` no cuDNN at all (its
    Winograd and FFT algorithms spread a change beyond the receptive field by rounding). Restored after."""
    cd, mm = torch.backends.cudnn, torch.backends.cuda.matmul
    was = mm.allow_tf32
    try:
        mm.allow_tf32 = False
        with cd.flags(enabled=cd.enabled and cudnn, benchmark=cd.benchmark, deterministic=cd.deterministic, allow_tf32=False):
            yield
    finally:
        mm.allow_tf32 = was


def as_list(out) -> list:
    if isinstance(out, (list, tuple)):
        return list(out)
    return [out]


def degenerate_input(t) -> bool:
    """An input that hides bugs: all zeros (or constant) floating data."""
    return isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() > 1 and bool((t == t.flatten()[0]).all())


@dataclass
class Stats:
    """A floating output against the truth, reduced to a few numbers."""
    norm: float  # ||x - t|| / ||t|| over elements where both are finite (absolute RMS if t == 0)
    max: float  # max |x - t| / max |t| likewise
    bad_nonfinite: int  # NaN/Inf in x where t is finite
    inf_mismatch: int  # t is +-Inf or NaN and x is not the same
    x_min: float
    x_max: float
    t_min: float
    t_max: float
    first_bad: int = -1  # flat index of the first non-finite mismatch

    @property
    def constant_while_truth_varies(self) -> bool:
        return self.x_min == self.x_max and self.t_min < self.t_max


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1)


def error_stats(x: torch.Tensor, t: torch.Tensor, chunk: int | None = None) -> Stats:
    """`x` any floating dtype on the device; `t` the truth (float64, on the device or the CPU)."""
    xf, tf = _flat(x), _flat(t)
    chunk = chunk_for(xf.numel(), chunk)
    dev = x.device
    sq_err = sq_ref = 0.0
    max_err = max_ref = 0.0
    bad = mism = 0
    first = -1
    x_lo = t_lo = math.inf
    x_hi = t_hi = -math.inf
    n = xf.numel()
    for s in range(0, n, chunk):
        xc = xf[s:s + chunk].to(torch.float64)
        tc = tf[s:s + chunk].to(dev, torch.float64)
        tfin, xfin = torch.isfinite(tc), torch.isfinite(xc)
        both = tfin & xfin
        nb = int((tfin & ~xfin).sum())
        if nb and first < 0:
            first = s + int((tfin & ~xfin).nonzero()[0])
        bad += nb
        same = (xc == tc) | (torch.isnan(xc) & torch.isnan(tc))
        mism += int((~tfin & ~same).sum())
        d = torch.where(both, (xc - tc).abs(), 0.0)
        tz = torch.where(tfin, tc, 0.0)
        sq_err += float((d * d).sum())
        sq_ref += float((tz * tz).sum())
        max_err = max(max_err, float(d.max()) if d.numel() else 0.0)
        max_ref = max(max_ref, float(tz.abs().max()) if tz.numel() else 0.0)
        if both.any():
            xs, ts = xc[both], tc[both]
            x_lo, x_hi = min(x_lo, float(xs.min())), max(x_hi, float(xs.max()))
            t_lo, t_hi = min(t_lo, float(ts.min())), max(t_hi, float(ts.max()))
        del xc, tc, d, tz
    if sq_ref > 0:
        norm, mx = math.sqrt(sq_err) / math.sqrt(sq_ref), max_err / max_ref
    else:  # an all-zero truth: absolute errors
        norm, mx = math.sqrt(sq_err / max(n, 1)), max_err
    return Stats(norm, mx, bad, mism, x_lo, x_hi, t_lo, t_hi, first)


def check_structure(outs: list, refs: list) -> str:
    """'' when the candidate's outputs have the reference's count, types, shapes, dtypes, devices."""
    if len(outs) != len(refs):
        return f"returned {len(outs)} outputs, reference returns {len(refs)}"
    for i, (o, r) in enumerate(zip(outs, refs)):
        if not isinstance(r, torch.Tensor):
            if o != r:
                return f"output {i}: {o!r} != {r!r}"
            continue
        if not isinstance(o, torch.Tensor):
            return f"output {i} is {type(o).__name__}, not a tensor"
        if type(o) is not torch.Tensor:  # a lazy subclass would compute inside the comparison
            return f"output {i} is a {type(o).__name__}, not a plain torch.Tensor"
        if o.shape != r.shape:
            return f"output {i} shape {tuple(o.shape)} != {tuple(r.shape)}"
        if o.dtype != r.dtype:
            return f"output {i} dtype {o.dtype} != {r.dtype}"
        if r.device.type == "meta":  # the verifier kept only eager's shape and dtype: the output belongs on the GPU
            if o.device.type != "cuda":
                return f"output {i} on {o.device}, not on the GPU"
        elif o.device != r.device:
            return f"output {i} on {o.device}, reference on {r.device}"
    return ""


def exact_equal(o: torch.Tensor, r: torch.Tensor, chunk: int | None = None) -> int:
    """Number of differing elements (integer and boolean outputs)."""
    of, rf = _flat(o), _flat(r)
    chunk = chunk_for(of.numel(), chunk)
    return sum(int((of[s:s + chunk] != rf[s:s + chunk]).sum()) for s in range(0, of.numel(), chunk))


def floors(dtype: torch.dtype) -> tuple[float, float]:
    e = EPS.get(dtype, 2.0 ** -23)
    return FLOOR_NORM_EPS * e, FLOOR_MAX_EPS * e


def float64_rule(cand: Stats, eager: Stats, dtype: torch.dtype) -> str:
    """'' when the candidate's error is within the rule, else why not."""
    if cand.bad_nonfinite:
        return (f"{cand.bad_nonfinite} NaN/Inf where the reference is finite (unwritten or overflowed); "
                f"first at flat index {cand.first_bad}")
    if cand.inf_mismatch > eager.inf_mismatch:
        return f"{cand.inf_mismatch} elements differ where the reference is Inf/NaN"
    if cand.constant_while_truth_varies:
        return "constant output while the reference varies"
    fn, fm = floors(dtype)
    lim_n, lim_m = max(RULE_MULTIPLE * eager.norm, fn), max(RULE_MULTIPLE * eager.max, fm)
    if cand.norm > lim_n:
        return (f"norm-wise error vs float64 {cand.norm:.2e} > {lim_n:.2e} "
                f"({RULE_MULTIPLE:g}x eager's own {eager.norm:.2e})")
    if cand.max > lim_m:
        return (f"max error vs float64 {cand.max:.2e} of the output's scale > {lim_m:.2e} "
                f"({RULE_MULTIPLE:g}x eager's own {eager.max:.2e})")
    return ""


def kernelbench_allclose(o: torch.Tensor, e: torch.Tensor, chunk: int | None = None) -> str:
    """KernelBench's check, `torch.allclose(o, e, atol=tol, rtol=tol)`, chunked; '' when it passes."""
    tol = KERNELBENCH_TOL.get(e.dtype, 1e-4)
    of, ef = _flat(o), _flat(e)
    chunk = chunk_for(of.numel(), chunk)
    for s in range(0, of.numel(), chunk):
        a, b = of[s:s + chunk], ef[s:s + chunk]
        if not torch.allclose(a, b, atol=tol, rtol=tol):
            bad = ~torch.isclose(a, b, atol=tol, rtol=tol)
            j = int(bad.nonzero()[0])
            return (f"{int(bad.sum())}+ elements outside atol=rtol={tol:g}; first at flat index {s + j}: "
                    f"got {a[j].item():.6g}, eager {b[j].item():.6g}")
    return ""


def relative_diff(a: torch.Tensor, b: torch.Tensor, chunk: int | None = None) -> float:
    """||a - b|| / ||b||, chunked, NaN-aware (a NaN anywhere gives inf)."""
    af, bf = _flat(a), _flat(b)
    chunk = chunk_for(af.numel(), chunk)
    num = den = 0.0
    for s in range(0, af.numel(), chunk):
        x, y = af[s:s + chunk].double(), bf[s:s + chunk].double()
        fin = torch.isfinite(y)
        if bool((fin & ~torch.isfinite(x)).any()):
            return math.inf
        d = torch.where(fin, x - y, 0.0)
        num += float((d * d).sum())
        den += float((torch.where(fin, y, 0.0) ** 2).sum())
    return math.sqrt(num) / math.sqrt(den) if den > 0 else math.sqrt(num)
