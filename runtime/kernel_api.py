"""The `egg` object a candidate's host code uses: allocate outputs, launch kernels.

Self-contained (torch, cupy, numpy only) so `egg export` ships this file as is,
and the exported ModelNew runs without EGG installed.

Launch arguments: a tensor passes its device pointer; a Python int passes as a
64-bit integer (`long long` in the kernel); a Python float as `float`; NumPy
scalars (np.int32(n), np.float64(x), ...) pass with their own type; a tensor map (`egg.tmap`: a
Hopper TMA descriptor of a tensor, encoded by the driver through ctypes) passes its 128 bytes by value.
"""
from __future__ import annotations

import re
import weakref

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
        self.dynamic_smem: dict = {}  # kernel -> the most dynamic shared memory a launch asked for (and was opted into)
        self._graphs = weakref.WeakKeyDictionary()  # module -> _Graph: its launches captured once
        self._staged = weakref.WeakKeyDictionary()  # module -> what its `staged` launches last read (addresses, versions)
        self.graph_error: str | None = None  # why capture failed (the module then launches as before)
        self._maps: dict = {}  # (address, dims, box, element bytes) -> an encoded tensor map
        self.replay = None  # verification only: the reference's draws, in order (runtime.draws.Queue), for `draw`
        self.drawn: list | None = None  # verification only: while a list, each fresh draw (op, tensor) is kept here

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

    def draw(self, op: str, shape, dtype=torch.float32, device="cuda", p: float = 0.0) -> torch.Tensor:
        """A random draw the reference makes inside its forward ("randn", "rand", or "dropout": a Dropout's keep mask
        of 0/1 values, each 1 with probability 1 - p): during the verifier's trials the reference's own numbers
        (`replay`), else drawn afresh from torch's generator, as eager draws them."""
        if self.replay is not None:
            return self.replay.take(op, shape, dtype, device)
        if op not in ("randn", "rand", "dropout"):
            raise ValueError(f"egg.draw: {op!r} is not a draw (randn, rand or dropout)")
        if op == "dropout":
            t = torch.empty(tuple(shape), dtype=dtype, device=device).bernoulli_(1.0 - p)
        else:
            t = (torch.randn if op == "randn" else torch.rand)(tuple(shape), dtype=dtype, device=device)
        if self.drawn is not None:
            self.drawn.append((op, t.clone()))
        return t

    def empty_like(self, t: torch.Tensor, dtype=None) -> torch.Tensor:
        return self.empty(t.shape, dtype or t.dtype, t.device)

    def tmap(self, t: torch.Tensor, dims, box, offset: int = 0, elem: int = 2, strides=None):
        """A TMA tensor map of `t`'s `elem`-byte elements (2 or 4) from element `offset` on, as a tensor of `dims`
        (innermost first, contiguous, or dims 1.. `strides` bytes apart) read in boxes of `box` into shared memory
        in the 128-byte swizzle, zeros past the edges: a kernel's `const __grid_constant__ EggTmap` parameter.
        Encoded by the driver once per (address, shape) and kept (a fresh input is a new address: a few microseconds)."""
        key = (t.data_ptr() + elem * offset, tuple(dims), tuple(box), elem, tuple(strides) if strides else None)
        m = self._maps.get(key)
        if m is None:
            if len(self._maps) > 256:  # the verifier's fresh inputs: keep the cache small
                self._maps.clear()
            m = self._maps[key] = encode_tmap(*key)
        return m

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
        # any dynamic size is opted into: a kernel's default limit is 48 KB less its static shared memory, so 48 KB
        # dynamic beside 1 KB static (the wgmma conv's 3-stage 64x64 ring and its row table) fails to launch
        if shared_mem and self.dynamic_smem.get(name, 0) < shared_mem:
            k.max_dynamic_shared_size_bytes = shared_mem
            self.dynamic_smem[name] = shared_mem
        grid = tuple(int(g) for g in (grid if isinstance(grid, (tuple, list)) else (grid,)))
        block = tuple(int(b) for b in (block if isinstance(block, (tuple, list)) else (block,)))
        if self.skip:
            self.launches += 1
            return
        timed = self.events is not None
        if timed:  # a program's time per kernel (its regions): events on the same stream, around the launch
            ev = (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            ev[0].record()
        # the stream as an argument, not a `with` block: a launch is Python time a program spends hundreds of
        k(grid, block, tuple(self._arg(a) for a in args), shared_mem=shared_mem, stream=self._stream())
        if timed:
            ev[1].record()
            self.events.append((name, *ev))
        self.launches += 1

    def graphed(self, owner, run, tensors: list) -> torch.Tensor:
        """`run(*tensors)` (a program's launches, its output returned) replayed as one CUDA graph: a
        program of hundreds of small kernels spends more time in Python launching them than the GPU
        spends running them. The first call runs `run` as is (it loads the kernels); the second
        captures it on copies of the tensors; every call after copies the inputs in, replays, and
        returns a copy of the output (a caller may keep it; the next replay overwrites the graph's
        own). Re-captured when the inputs' shapes or the owner's buffers move. Launched directly, as
        without a graph, while launches are skipped or timed one by one (the verifier's checks)."""
        if self.skip or self.events is not None or self.graph_error is not None:
            return run(*tensors)
        # the owner's tensors by identity (a module moved or reloaded holds new ones), kept alive with the
        # graph so an id is never reused while it stands; a few microseconds for hundreds of buffers
        state = _state(owner)
        sig = (tuple((tuple(t.shape), t.dtype, t.device, t.stride()) for t in tensors), tuple(map(id, state)))
        g = self._graphs.get(owner)
        if g is None or g.sig != sig:
            before = self.launches
            out = run(*tensors)
            self._graphs[owner] = _Graph(sig, state, self.launches - before)
            return out
        if g.replay is None:
            static = [torch.empty_like(t).copy_(t) for t in tensors]
            try:
                g.replay, g.out = self._capture(run, static)
            except Exception as exc:  # noqa: BLE001 - a capture refused (an unsupported call): launch directly
                self.graph_error = f"{type(exc).__name__}: {exc}"
                return run(*tensors)
            g.static = static
        else:
            for s, t in zip(g.static, tensors):
                s.copy_(t)
        g.replay()
        self.launches += g.launches
        return g.out.clone()

    def staged(self, owner, run, tensors: list) -> None:
        """`run()`: a program's launches that read only the module's parameters and buffers (`tensors`) and write
        buffers of its own: a weight staged in another layout, a table computed from weights. Run again only when one
        of `tensors` changed since (its address, or its version: an in-place update; a module moved moves them), so
        a call whose weights are those of the last one skips them (ResNet-18's 19 weight stagings, about 60 us of its
        0.93 ms). While launches are skipped (the verifier's check that the kernels matter) nothing is
        kept: the next call runs them. A write through `.data` moves no version (as autograd does not see it): after
        one, `load_state_dict` or an in-place op on the tensor itself, or a new module."""
        def key():
            return tuple((t.data_ptr(), t._version) for t in tensors)
        if self._staged.get(owner) == key():
            return
        run()
        if not self.skip:
            self._staged[owner] = key()  # after the run: what it wrote as it left it

    def _capture(self, run, static: list):
        """(replay, output) of `run(*static)` captured as a CUDA graph on torch's capture stream (our
        launches go to torch's current stream, which inside the capture is the capturing one)."""
        graph = torch.cuda.CUDAGraph()
        before = self.launches
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads' CUDA calls are theirs
            out = run(*static)
        self.launches = before  # captured, not run
        return graph.replay, out


TMAP = np.dtype([("v", np.uint64, (16,))])  # CUtensorMap: 128 opaque bytes (64-byte aligned in the kernel)
_encode = []


def encode_tmap(ptr: int, dims, box, elem: int = 2, strides=None):
    """cuTensorMapEncodeTiled through ctypes on the driver (no package beyond numpy): a tensor of
    `elem`-byte elements (2 or 4) of `dims` (innermost first, contiguous, or dims 1.. `strides` bytes apart,
    multiples of 16) at `ptr`, boxes of `box`, the 128-byte swizzle, zero fill. A numpy structured scalar,
    which CuPy passes to a kernel by value."""
    import ctypes
    r = len(dims)
    if elem not in (2, 4):
        raise ValueError(f"a tensor map of {elem}-byte elements (2 or 4 here)")
    if ptr % 16 or (elem * dims[0]) % 16 or box[0] * elem > 128 or max(box) > 256 or len(box) != r or not 1 < r <= 5:
        raise ValueError(f"a tensor map needs a 16-byte-aligned address and rows, boxes of at most 128 bytes by 256: "
                         f"address {ptr:#x}, dims {dims}, box {box}")
    if strides is None:
        strides, at = [], elem
        for d in dims[:-1]:
            at *= d
            strides.append(at)
    elif len(strides) != r - 1 or any(x % 16 for x in strides):
        raise ValueError(f"a tensor map's strides: {r - 1} multiples of 16 bytes, not {strides}")
    if not _encode:
        fn = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
        fn.restype = ctypes.c_int
        _encode.append(fn)
    m = (ctypes.c_uint64 * 16)()
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    # UINT16 or UINT32 (the swizzle and zero fill do not care whether the bits are bf16, fp16 or fp32), no
    # interleave, SWIZZLE_128B (3), L2 promotion 128 bytes (2), zeros out of bounds (0)
    res = _encode[0](ctypes.byref(m), 1 if elem == 2 else 2, r, ctypes.c_void_p(ptr), (u64 * r)(*dims), (u64 * (r - 1))(*strides),
                     (u32 * r)(*box), (u32 * r)(*([1] * r)), 0, 3, 2, 0)
    if res:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed (CUresult {res}) for dims {dims}, box {box}")
    return np.frombuffer(bytes(m), dtype=TMAP)[0]


def _state(owner) -> tuple:
    """The tensors a module's launches read (its parameters and buffers)."""
    if owner._modules:
        return tuple(owner.parameters()) + tuple(owner.buffers())
    return tuple(owner._parameters.values()) + tuple(owner._buffers.values())


class _Graph:
    __slots__ = ("sig", "state", "launches", "replay", "static", "out")

    def __init__(self, sig, state, launches):
        self.sig, self.state, self.launches = sig, state, launches
        self.replay, self.static, self.out = None, [], None


# state.MODULE_PART, repeated here so this file stays self-contained (a test holds them equal)
MODULE_PART = "// ---- egg: a new compilation unit ----"


def kernel_span(source: str, name: str) -> tuple[int, int] | None:
    """Where kernel `name` is defined in `source`: from its `__global__` signature to the next kernel's (or the end);
    None where no kernel of that name is defined there."""
    head = re.search(rf"__global__[^;{{}}]*?\b{re.escape(name)}\s*\(", source)
    if head is None:
        return None
    end = source.find("__global__", head.end())
    return head.start(), end if end >= 0 else len(source)


class Units:
    """A module of several compilation units, each loaded as its own CuPy module: `get_function` finds a
    kernel in the unit that defines it (kernel names are unique across a program's units)."""

    def __init__(self, modules: list, units: list[str]):
        self.modules, self.units = modules, units

    def get_function(self, name: str):
        for mod, unit in zip(self.modules, self.units):
            if kernel_span(unit, name) is not None:
                f = mod.get_function(name)
                return f if hasattr(f, "num_regs") else CubinKernel(f)
        raise KeyError(f"no compilation unit defines kernel {name}")


class CubinKernel:
    """A kernel of a module loaded from a cubin (a bare cupy.cuda.function.Function): launched the same
    way, with the attributes a RawModule's RawKernel has and the runtime reads (registers, static shared
    memory, local memory) or sets (the dynamic shared-memory limit past 48 KB), through the driver."""

    def __init__(self, f):
        self.f = f

    def __call__(self, *args, **kw):
        return self.f(*args, **kw)

    def _attr(self, name: str) -> int:
        from cupy.cuda import driver
        return driver.funcGetAttribute(getattr(driver, name), self.f.ptr)

    num_regs = property(lambda self: self._attr("CU_FUNC_ATTRIBUTE_NUM_REGS"))
    shared_size_bytes = property(lambda self: self._attr("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES"))
    local_size_bytes = property(lambda self: self._attr("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES"))

    @property
    def max_dynamic_shared_size_bytes(self) -> int:
        return self._attr("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES")

    @max_dynamic_shared_size_bytes.setter
    def max_dynamic_shared_size_bytes(self, value: int) -> None:
        from cupy.cuda import driver
        driver.funcSetAttribute(self.f.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(value))


def device_arch() -> str:
    """The device's target; Hopper's and Blackwell's with the "a" suffix (wgmma, setmaxnreg and TMA
    multicast exist only there, and CuPy's own default leaves it off)."""
    import cupy
    cc = cupy.cuda.Device().compute_capability
    return f"sm_{cc}a" if cc in ("90", "100", "120") else f"sm_{cc}"


def load(cuda_source: str, options=()) -> KernelAPI:
    """For exported modules: compile the source with CuPy (each compilation unit its own module) for
    this device's target, and return the API."""
    import cupy
    opts = (f"-arch={device_arch()}", "--std=c++17", *options)
    units = cuda_source.split("\n" + MODULE_PART + "\n")
    if len(units) == 1:
        return KernelAPI(cupy.RawModule(code=cuda_source, options=opts))
    return KernelAPI(Units([cupy.RawModule(code=u, options=opts) for u in units], units))
