"""The `egg` object a candidate's host code uses: allocate outputs, launch kernels.

Self-contained (torch, cupy, numpy only) so `egg export` ships this file as is,
and the exported ModelNew runs without EGG installed.

Launch arguments: a tensor passes its device pointer; a Python int passes as a
64-bit integer (`long long` in the kernel); a Python float as `float`; NumPy
scalars (np.int32(n), np.float64(x), ...) pass with their own type.
"""
from __future__ import annotations

import numpy as np
import torch


class KernelAPI:
    def __init__(self, module, poison: bool = False):
        self.module = module
        self.poison = poison  # verification fills outputs with NaN/-1 bytes so unwritten elements fail
        self.skip = False  # verification only: launches do nothing (must the candidate's own kernels matter?)
        self.launches = 0
        self.events: list | None = None  # (kernel, start, end) CUDA events per launch, while a list
        self._kernels: dict = {}
        self._streams: dict = {}
        self._smem_set: dict = {}

    def kernel(self, name: str):
        k = self._kernels.get(name)
        if k is None:
            k = self._kernels[name] = self.module.get_function(name)
        return k

    def _stream(self):
        import cupy
        ptr = torch.cuda.current_stream().cuda_stream
        s = self._streams.get(ptr)
        if s is None:
            s = self._streams[ptr] = cupy.cuda.ExternalStream(ptr)
        return s

    def empty(self, shape, dtype=torch.float32, device="cuda") -> torch.Tensor:
        t = torch.empty(tuple(shape), dtype=dtype, device=device)
        if self.poison and t.numel():
            import cupy
            # 0xFF bytes: NaN for every float width, -1 for integers; set outside torch so the guard sees no op
            cupy.cuda.runtime.memsetAsync(t.data_ptr(), 0xFF, t.numel() * t.element_size(),
                                          torch.cuda.current_stream().cuda_stream)
        return t

    def empty_like(self, t: torch.Tensor, dtype=None) -> torch.Tensor:
        return self.empty(t.shape, dtype or t.dtype, t.device)

    @staticmethod
    def _arg(a):
        if isinstance(a, torch.Tensor):
            return np.uint64(a.data_ptr())
        if isinstance(a, bool):
            return np.int32(a)
        if isinstance(a, int):
            return np.int64(a)
        if isinstance(a, float):
            return np.float32(a)
        return a

    def launch(self, name: str, grid, block, args, shared_mem: int = 0) -> None:
        k = self.kernel(name)
        if shared_mem > 48 * 1024 and self._smem_set.get(name, 0) < shared_mem:
            k.max_dynamic_shared_size_bytes = shared_mem
            self._smem_set[name] = shared_mem
        grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
        block = tuple(int(b) for b in (block if isinstance(block, (tuple, list)) else (block,)))
        if self.skip:
            self.launches += 1
            return
        timed = self.events is not None
        if timed:  # a program's time per kernel (its regions): events on the same stream, around the launch
            ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[0].record()
        with self._stream():
            k(grid, block, tuple(self._arg(a) for a in args), shared_mem=shared_mem)
        if timed:
            ev[1].record()
            self.events.append((name, *ev))
        self.launches += 1


def load(cuda_source: str, options=()) -> KernelAPI:
    """For exported modules: compile the source with CuPy and return the API."""
    import cupy
    return KernelAPI(cupy.RawModule(code=cuda_source, options=("--std=c++17", *options)))
