"""The evaluation's memory plan: fit wherever eager fits.

No full copies of inputs for the mutation check (a chunked fingerprint instead), no float64
copies of whole outputs (comparisons are chunked, runtime/correctness.py), the float64 truth
on the device only when about twice eager's peak is free (else on the CPU), and an
evaluation that still does not fit reported as such, with the numbers.
"""
from __future__ import annotations

import re

import torch

from runtime.correctness import chunk_for

GIB = float(1 << 30)
_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def fingerprint(xs: list) -> list:
    """Per tensor: pointer, shape, strides, dtype and two checksums of its bits (one position-weighted),
    so an in-place change, a swap of elements or a `set_` shows up without a copy of the tensor."""
    out = []
    for x in xs:
        if not isinstance(x, torch.Tensor):
            out.append(repr(x))
            continue
        flat = x.detach().reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.view(torch.uint8)
        elif flat.is_floating_point() or flat.dtype.itemsize in _INT_VIEW:
            flat = flat.view(_INT_VIEW[flat.element_size()])
        s1 = s2 = 0
        step = chunk_for(flat.numel())
        for s in range(0, flat.numel(), step):
            b = flat[s:s + step].to(torch.int64)
            w = torch.arange(s + 1, s + 1 + b.numel(), device=b.device, dtype=torch.int64) % 65521
            s1 += int(b.sum())
            s2 += int((b * w).sum())
        out.append((x.data_ptr(), tuple(x.shape), tuple(x.stride()), str(x.dtype), s1, s2))
    return out


def storages(xs: list) -> set:
    return {x.untyped_storage().data_ptr() for x in xs if isinstance(x, torch.Tensor) and x.numel()}


def free_bytes() -> int:
    """What the allocator could still hand out: free on the device plus cached but unused."""
    free, _ = torch.cuda.mem_get_info()
    return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())


def truth_fits_on_device(eager_peak: int) -> bool:
    # the float64 reference needs about twice eager's peak (inputs, intermediates, outputs at 8 bytes)
    return 2 * eager_peak < 0.85 * free_bytes()


def oom_message(exc: BaseException, eager_peak: int | None) -> str:
    total = torch.cuda.get_device_properties(0).total_memory
    m = re.search(r"Tried to allocate ([\d.]+) (GiB|MiB|KiB)", str(exc))
    ask = float(m.group(1)) * {"GiB": GIB, "MiB": 1 << 20, "KiB": 1 << 10}[m.group(2)] if m else 0.0
    need = torch.cuda.memory_allocated() + ask
    eager = f"; eager's own peak is {eager_peak / GIB:.1f} GiB" if eager_peak else ""
    return f"needs {need / GIB:.1f} GiB, the GPU has {total / GIB:.1f} GiB{eager}"
