"""The NaN trial of the float64 rule: a few NaN in the inputs must come out where eager puts them.

The other trials draw finite inputs, so no kernel is ever asked what it does with a NaN, and the usual
ways of writing relu, clamp or a max (fmaxf/fminf, `x > m ? x : m`) drop it: a NaN in a row becomes 0, a
bound, or vanishes from the row's max, where PyTorch gives NaN. This trial puts NaN at a few nonzero
places of each floating input (zeros stay zeros: a kernel may rely on a task's zero pattern, as the
widened trial allows) and compares where the candidate's output is NaN with where eager's is.

An output element must be NaN where eager's is and the element depends on the NaN'd inputs: eager run
twice more with those places set to two different finite values (a large positive one and a negative
one, so a max, a min, a relu and a square each see them), without cuDNN or TF32, moves it. Where eager is NaN only through
`0 * NaN` (a diagonal matrix built and multiplied, a masked product), nothing depends on the input and a
kernel that skips the zero product keeps its finite value. A NaN where eager has none is always wrong.
An integer output (argmax, argmin) must equal eager's wherever it moves between the two runs: torch returns
the first NaN's index.
"""
from __future__ import annotations

import torch

from runtime.correctness import CHUNK

NAN_PLACES = 8  # NaN a floating input at most (fewer in small ones): isolated, so the masks say where they went
PROBE_VALUES = (1.0e2, -6.0e1)  # the two finite stand-ins of the dependence runs


def nan_places(inputs: list, seed: int) -> list:
    """For each input: the flat indices (on its device) where the trial puts NaN, or None (not a floating tensor,
    or no nonzero element). Drawn among the input's nonzero elements."""
    places = []
    for j, x in enumerate(inputs):
        if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel()):
            places.append(None)
            continue
        g = torch.Generator(device=x.device).manual_seed(seed + 7919 * j)
        n = min(NAN_PLACES, max(1, x.numel() // 4096))
        idx = torch.randint(0, x.numel(), (4 * n,), generator=g, device=x.device)
        idx = idx[x[torch.unravel_index(idx, x.shape)] != 0][:n]  # zeros kept
        places.append(idx if idx.numel() else None)
    return places


def put(inputs: list, places: list, value: float) -> list:
    """`value` written at the places, in place (the trial's inputs are its own fresh draw)."""
    for x, idx in zip(inputs, places):
        if idx is not None:
            x[torch.unravel_index(idx, x.shape)] = value
    return inputs


def depends(a: torch.Tensor, b: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """Where the two dependence runs' outputs differ by more than rounding (1e-4 of the element, or 1e-6 of the
    output's largest finite value): those elements take the NaN'd inputs into account. A bool mask of a's shape,
    computed `chunk` elements at a time (no full-size float64 temporaries)."""
    af, bf = a.reshape(-1), b.reshape(-1)
    scale = 0.0
    for s in range(0, af.numel(), chunk):
        x = af[s:s + chunk].double()
        fin = torch.isfinite(x)
        if fin.any():
            scale = max(scale, float(x[fin].abs().max()))
    out = torch.empty(af.shape, dtype=torch.bool, device=a.device)
    for s in range(0, af.numel(), chunk):
        x, y = af[s:s + chunk].double(), bf[s:s + chunk].double()
        fin = torch.isfinite(x) & torch.isfinite(y)
        tol = 1e-4 * torch.maximum(x.abs(), y.abs()) + 1e-6 * scale
        moved = torch.where(fin, (x - y).abs() > tol, torch.isfinite(x) != torch.isfinite(y))
        out[s:s + chunk] = moved | (torch.isinf(x) & torch.isinf(y) & (x != y))
    return out.reshape(a.shape)


def depends_of(a, b):
    """The dependence mask of one output from its two stand-in runs: `depends` for floating outputs, the elements
    that differ for integer ones (an argmax that moves with the stand-in), None for anything else."""
    if not isinstance(a, torch.Tensor):
        return None
    return depends(a, b) if a.is_floating_point() else (a != b)


def eager_view(e):
    """What judge needs of eager's output on the NaN'd inputs: its NaN mask (floating), itself (integer), or None."""
    if not isinstance(e, torch.Tensor):
        return None
    return torch.isnan(e) if e.is_floating_point() else e


def judge(outs: list, eager_nan: list, dep: list) -> str:
    """'' when each floating output is NaN wherever eager's is and it depends on the NaN'd inputs, and nowhere
    eager's is not, and each integer output equals eager's where it depends on them (argmax/argmin: the first NaN's
    index). `eager_nan`: eager_view of each output; `dep`: depends_of each."""
    for i, (o, m, d) in enumerate(zip(outs, eager_nan, dep)):
        if m is None or d is None or not isinstance(o, torch.Tensor):
            continue
        if m.dtype != torch.bool or not o.is_floating_point():  # an integer output: eager's values where they depend
            bad = d & (o.reshape(m.shape) != m)
            if bad.any():
                first = int(bad.reshape(-1).nonzero()[0])
                return (f"output {i}: {int(bad.sum())} element(s) differ from eager's on NaN inputs (first at flat index "
                        f"{first}: got {int(o.reshape(-1)[first])}, eager {int(m.reshape(-1)[first])})")
            continue
        c = torch.isnan(o).reshape(m.shape)
        lost = m & d & ~c
        extra = c & ~m
        if lost.any():
            first = int(lost.reshape(-1).nonzero()[0])
            return (f"output {i}: {int(lost.sum())} element(s) finite where eager gives NaN from a NaN input (of "
                    f"{int((m & d).sum())}; first at flat index {first}: got {float(o.reshape(-1)[first])!r})")
        if extra.any():
            first = int(extra.reshape(-1).nonzero()[0])
            return f"output {i}: {int(extra.sum())} element(s) NaN where eager's are not (first at flat index {first})"
    return ""
