"""Compile CUDA source: CuPy RawModule on a GPU, NVRTC (or nvcc) compile-only without one.

Errors come back as structured `CompileResult`s, never as exceptions; results are
cached by a hash of (source, options, arch).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from concurrent.futures import ThreadPoolExecutor

from runtime.kernel_api import Units, device_arch
from state import CompileError, CompileResult, KernelResources, module_parts

SOURCE_NAME = "kern.cu"
_ERR_RE = re.compile(r"^(?:.*?kern\.cu)\((\d+)\): (?:catastrophic )?error:?\s*(.*)$", re.M)
_ENTRY_RE = re.compile(r"Compiling entry function '([^']+)'")
_REGS_RE = re.compile(r"Used (\d+) registers")
_SMEM_RE = re.compile(r"(\d+) bytes smem")
_SPILL_RE = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def cache_dir() -> Path:
    d = Path(os.environ.get("EGG_CACHE_DIR", Path.home() / ".cache" / "egg")) / "compile"
    d.mkdir(parents=True, exist_ok=True)
    return d


def source_key(source: str, options: list[str], arch: str) -> str:
    h = hashlib.sha256()
    for part in (source, "\0".join(options), arch):
        h.update(part.encode())
        h.update(b"\1")
    return h.hexdigest()


def parse_errors(log: str) -> list[CompileError]:
    errs = [CompileError(line=int(m.group(1)), message=m.group(2).strip()) for m in _ERR_RE.finditer(log)]
    if not errs and any(w in log.lower() for w in ("error", "fatal")):
        first = next((ln for ln in log.splitlines() if "error" in ln.lower() or "fatal" in ln.lower()), log.strip()[:300])
        errs = [CompileError(line=None, message=first.strip())]
    return errs


def parse_resources(log: str) -> list[KernelResources]:
    """Read ptxas's `-v` report: one block a kernel, starting at 'Compiling entry function'."""
    out: list[KernelResources] = []
    blocks = _ENTRY_RE.split(log)
    # split gives [pre, name1, body1, name2, body2, ...]
    for name, body in zip(blocks[1::2], blocks[2::2]):
        r = KernelResources(name=name)
        if m := _REGS_RE.search(body):
            r.registers = int(m.group(1))
        if m := _SMEM_RE.search(body):
            r.shared_bytes = int(m.group(1))
        if m := _SPILL_RE.search(body):
            r.stack_bytes, r.spill_store_bytes, r.spill_load_bytes = map(int, m.groups())
        out.append(r)
    return out


def _cached(key: str) -> CompileResult | None:
    f = cache_dir() / f"{key}.json"
    if f.exists():
        try:
            res = CompileResult.model_validate_json(f.read_text())
            return res.model_copy(update={"cached": True})
        except ValueError:
            f.unlink(missing_ok=True)
    return None


def _store(key: str, res: CompileResult) -> None:
    # a temporary name of this writer's own: candidates verified in parallel (threads, processes) can
    # compile the same source at once, and a shared ".tmp" was renamed away under the second writer
    f = cache_dir() / f"{key}.json"
    tmp = f.with_name(f"{key}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(res.model_dump_json())
    tmp.replace(f)


def cuda_include_dirs() -> list[str]:
    """Where cuda_bf16.h and friends live: the pip CUDA runtime wheel, or a local toolkit."""
    import glob
    import sysconfig
    cands = [os.environ.get("CUDA_PATH", ""), os.environ.get("CUDA_HOME", ""), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    import sys
    wheels = [str(Path(p) / "nvidia" / "cu13") for p in [sysconfig.get_paths()["purelib"], *sys.path] if p]  # pip --target too
    dirs = [*cands, *wheels]
    return [f"{d}/include" for d in dirs if d and Path(d, "include", "cuda_bf16.h").exists()][:1]


def _nvrtc_compile(source: str, options: list[str], arch: str) -> CompileResult:
    from cuda.bindings import nvrtc

    t0 = time.perf_counter()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), SOURCE_NAME.encode(), 0, [], [])
    opts = [f"-arch={arch}", "-Xptxas=-v", "--std=c++17", *[f"-I{d}" for d in cuda_include_dirs()], *options]
    try:
        (rc,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        _, n = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = b" " * n
        nvrtc.nvrtcGetProgramLog(prog, buf)
        log = buf.rstrip(b"\x00 ").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    ok = rc == nvrtc.nvrtcResult.NVRTC_SUCCESS
    return CompileResult(ok=ok, backend="nvrtc", arch=arch, log=log[-20000:],
                         errors=[] if ok else parse_errors(log),
                         resources=parse_resources(log) if ok else [],
                         seconds=time.perf_counter() - t0)


def _nvcc_compile(source: str, options: list[str], arch: str) -> CompileResult:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("neither NVRTC (pip cuda-bindings, cuda-toolkit[nvrtc]) nor nvcc is available")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / SOURCE_NAME
        src.write_text(source)
        gencode = f"-gencode=arch=compute_{arch[3:]},code={arch}"
        cmd = [nvcc, "-cubin", gencode, "-Xptxas", "-v", "-std=c++17", "-o", str(Path(d) / "k.cubin"),
               *options, str(src)]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=d)
    log = (p.stdout + p.stderr).replace(str(src), SOURCE_NAME)
    ok = p.returncode == 0
    return CompileResult(ok=ok, backend="nvcc", arch=arch, log=log[-20000:],
                         errors=[] if ok else parse_errors(log),
                         resources=parse_resources(log) if ok else [], seconds=time.perf_counter() - t0)


def compile_check(source: str, options: list[str] | None = None, arch: str = "sm_90a",
                  use_cache: bool = True) -> CompileResult:
    """Compile without a GPU; report errors and per-kernel resources. A source of several compilation
    units (state.MODULE_PART) compiles them in parallel, its errors' lines counted in the whole source."""
    options = list(options or [])
    key = source_key(source, options, arch)
    if use_cache and (hit := _cached(key)) is not None:
        return hit

    def one(unit: str) -> CompileResult:
        try:
            return _nvrtc_compile(unit, options, arch)
        except ImportError:
            return _nvcc_compile(unit, options, arch)
    units = module_parts(source)
    if len(units) == 1:
        res = one(source)
    else:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=min(len(units), os.cpu_count() or 1)) as pool:  # NVRTC releases the GIL
            res = _merged(list(pool.map(one, units)), units, time.perf_counter() - t0)
    if use_cache:
        _store(key, res)
    return res


def _merged(parts: list[CompileResult], units: list[str], seconds: float) -> CompileResult:
    """Compilation units' results as the whole source's: errors at their line in it (a unit starts after
    the previous ones and their separator lines)."""
    errors, offset = [], 0
    for r, unit in zip(parts, units):
        errors += [e.model_copy(update={"line": e.line + offset}) if e.line else e for e in r.errors]
        offset += unit.count("\n") + 2
    return parts[0].model_copy(update={"ok": all(r.ok for r in parts), "log": "\n".join(r.log for r in parts)[-20000:],
                                       "errors": errors, "resources": [x for r in parts for x in r.resources],
                                       "seconds": seconds})


def _cubin(unit: str, options: list[str], arch: str) -> bytes:
    """One compilation unit to a cubin through NVRTC (no CUDA context needed: any thread)."""
    from cuda.bindings import nvrtc
    err, prog = nvrtc.nvrtcCreateProgram(unit.encode(), SOURCE_NAME.encode(), 0, [], [])
    opts = [f"-arch={arch}", "--std=c++17", *[f"-I{d}" for d in cuda_include_dirs()], *options]
    try:
        (rc,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        if rc != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, n = nvrtc.nvrtcGetProgramLogSize(prog)
            buf = b" " * n
            nvrtc.nvrtcGetProgramLog(prog, buf)
            raise RuntimeError(buf.rstrip(b"\x00 ").decode(errors="replace"))  # load_units falls back to CuPy
        _, n = nvrtc.nvrtcGetCUBINSize(prog)
        buf = b" " * n
        nvrtc.nvrtcGetCUBIN(prog, buf)
        return buf
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def load_units(source: str, options: list[str], arch: str | None):
    """A CuPy module for a source: one RawModule; several compilation units compiled to cubins in
    parallel threads (NVRTC) and loaded here, in the caller's CUDA context (CuPy compiling them one by
    one where NVRTC's bindings are missing)."""
    import cupy
    units = module_parts(source)
    target = arch or device_arch()
    opts = (f"-arch={target}", "--std=c++17", *options)
    if len(units) == 1:
        return cupy.RawModule(code=source, options=opts)
    try:
        with ThreadPoolExecutor(max_workers=min(len(units), os.cpu_count() or 1)) as pool:
            cubins = list(pool.map(lambda u: _cubin(u, list(options), target), units))
        mods = []
        for cb in cubins:
            m = cupy.cuda.function.Module()
            m.load(cb)
            mods.append(m)
        return Units(mods, units)
    except Exception:  # NVRTC's bindings missing or unusable here (headers elsewhere), a cubin the driver
        # refused: CuPy compiles each unit as it would the whole (and raises its CompileException if one is wrong)
        return Units([cupy.RawModule(code=u, options=opts) for u in units], units)


def load_module(source: str, kernel_names: list[str], options: list[str] | None = None,
                arch: str | None = None):
    """Compile on the live GPU through CuPy. Returns (module or None, CompileResult)."""
    import cupy

    options = list(options or [])
    t0 = time.perf_counter()
    try:
        mod = load_units(source, options, arch)
        kernels = {n: mod.get_function(n) for n in kernel_names}
    except cupy.cuda.compiler.CompileException as exc:
        log = str(exc).replace("/tmp/", "")
        log = re.sub(r"\S*?(\w+\.cu)\(", r"kern.cu(", log)
        return None, CompileResult(ok=False, backend="cupy", arch=arch or "device", log=log[-20000:],
                                   errors=parse_errors(log), seconds=time.perf_counter() - t0)
    except Exception as exc:  # a missing kernel name, a driver error
        return None, CompileResult(ok=False, backend="cupy", arch=arch or "device",
                                   log=f"{type(exc).__name__}: {exc}",
                                   errors=[CompileError(message=f"{type(exc).__name__}: {exc}")],
                                   seconds=time.perf_counter() - t0)
    res = [KernelResources(name=n, registers=k.num_regs, shared_bytes=k.shared_size_bytes,
                           stack_bytes=k.local_size_bytes) for n, k in kernels.items()]
    return mod, CompileResult(ok=True, backend="cupy", arch=arch or "device", resources=res,
                              seconds=time.perf_counter() - t0)


def resources_json(res: CompileResult) -> str:
    return json.dumps([r.model_dump() for r in res.resources])
