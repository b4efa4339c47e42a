"""Which launch of the expert's kernel leaves NaN in what it writes, on the GPU: the verifier fills every buffer a
candidate allocates with NaN bytes (so an element no kernel writes fails), and a program's failure says only that
its output had NaN. This runs the default design (or a --vary of it) once on a task's inputs, with the buffers
poisoned as the verifier does, and after each launch prints how many of its first argument's elements are NaN
and the first and last of them, how many are infinite and the largest finite magnitude (a wrong but finite stage
shows there, before the NaN it causes downstream).

  python3 benchmarks/nan_probe.py TASK [--vary '{"BM": 64}'] [--seed 7] [--twice KERNEL] [--fill-smem PREFIX] [--stats-3d-phased]
     [--smem-extra KERNEL=BYTES] [--cold KERNEL] [--again PREFIX]
     [--set MODULE.NAME=VALUE] [--stage FAMILY=JSON] [--patch 'KERNEL|OLD|NEW']

--stats-3d-phased lifts conv_stats' refusal of 3-d phased convs (level 2 task 15's NaN, still unexplained), e.g. under
`compute-sanitizer --tool racecheck` on a copy of the task with a smaller batch."""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


SENTINEL = 1234.5  # --again's second spare: what a kernel never writes keeps it

FILL = r"""
extern "C" __global__ void egg_fill_smem(int words) {
    extern __shared__ unsigned int s[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) s[i] = 0xFFFFFFFFu;
    __syncthreads();
    if (s[(threadIdx.x * 7) % words] == 1u) s[0] = 0u;  // kept: the stores are not dead
}
"""


def smem_filler(blocks: int = 1056, kb: int = 200):
    """A launcher of `blocks` blocks each filling `kb` KB of shared memory with NaN bytes: every SM's, a few times over."""
    import cupy
    k = cupy.RawKernel(FILL, "egg_fill_smem")
    k.max_dynamic_shared_size_bytes = kb * 1024
    return lambda: k((blocks,), (256,), (cupy.int32(kb * 256),), shared_mem=kb * 1024)


def patched(src: str, kernel: str, old: str, new: str) -> str:
    """`src` with the first `old` in `kernel`'s definition (its signature up to the next `__global__`) made `new`."""
    from runtime.kernel_api import kernel_span
    span = kernel_span(src, kernel)
    if span is None:
        sys.exit(f"--patch: no kernel {kernel} in the program")
    at = src.find(old, *span)
    if at < 0:
        sys.exit(f"--patch: {old!r} is not in {kernel}")
    return src[:at] + new + src[at + len(old):]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--vary", default="{}")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--decode", help="a shape (e.g. 16,32,31,63,63) the first elements of each buffer are read as: "
                    "NaN counts along each of its dims")
    ap.add_argument("--twice", action="append", default=[], help="a kernel name launched once more before its own launch, "
                    "into a poisoned copy of its output (a NaN the second launch lacks depends on what ran before it)")
    ap.add_argument("--fill-smem", metavar="PREFIX", help="before each launch whose kernel name starts so, fill every SM's "
                    "shared memory with NaN bytes (a kernel clean without it and NaN with it reads shared memory it never wrote)")
    ap.add_argument("--stats-3d-phased", action="store_true", help="let conv_stats take a 3-d phased conv")
    ap.add_argument("--smem-extra", action="append", default=[], metavar="KERNEL=BYTES", help="launch KERNEL with BYTES "
                    "more dynamic shared memory (fewer blocks an SM: a NaN that goes with one block an SM is a neighbour's)")
    ap.add_argument("--again", metavar="PREFIX", help="each kernel whose name starts so launched twice more after its own "
                    "launch, into a poisoned copy of its output, then one filled with a sentinel: how far each lands from the "
                    "program's launch (a deterministic kernel lands on it exactly; a race does not) and how much the "
                    "second left unwritten")
    ap.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=VALUE", help="a module constant set "
                    "before the design (a Python literal), e.g. agents.expert.agent.SMALL_M=0: the same task with one "
                    "choice undone")
    ap.add_argument("--stage", action="append", default=[], metavar="FAMILY=JSON", help="knobs merged into every default "
                    "design of that family, a program's untuned stages too (e.g. conv_stats='{\"stages\": 2}')")
    ap.add_argument("--patch", action="append", default=[], metavar="KERNEL|OLD|NEW", help="in KERNEL's source (from its "
                    "signature to the next kernel's) the first OLD replaced by NEW: a probe's line (a printf), a wait made "
                    "stricter; the run stops where OLD is not there")
    ap.add_argument("--cold", action="append", default=[], help="a kernel name whose launches (the extra one of --twice "
                    "too) follow an L2 flush (a NaN that only a cold L2 shows is a load read before it landed)")
    a = ap.parse_args()
    import torch

    import ast
    import importlib
    for e in a.set:
        target, value = e.split("=", 1)
        mod, name = target.rsplit(".", 1)
        setattr(importlib.import_module(mod), name, ast.literal_eval(value))
    if a.stage:
        from agents.expert.agent import ExpertAgent
        over = {f: json.loads(v) for f, v in (e.split("=", 1) for e in a.stage)}
        plain = ExpertAgent._default

        def _default(self, fam, *args, **kw):
            d = plain(self, fam, *args, **kw)
            return {**d, **over[fam]} if fam in over and isinstance(d, dict) else d
        ExpertAgent._default = _default
    if a.stats_3d_phased:
        from agents.expert.templates import conv_stats
        conv_stats.DECLINE_3D_PHASED = False

    from hardware_profiles.profile import detect
    from kernel_probe import candidate, expert_design
    from runtime.kernel_api import KernelAPI
    from runtime.worker import Worker
    from state import Evaluation, Verdict

    agent, g, fam, plan, base = expert_design(a.task)
    prof = detect()
    pk = agent.emit(g, fam, plan, {**base, **json.loads(a.vary)}, prof)
    print(pk.description, pk.params, flush=True)
    for e in a.patch:
        pk.cuda_source = patched(pk.cuda_source, *e.split("|", 2))
    cand = candidate(pk, "nan-probe")
    launch, shape = KernelAPI.launch, [int(v) for v in a.decode.split(",")] if a.decode else []

    fill = smem_filler() if a.fill_smem else None
    extra = {k: int(v) for k, v in (e.split("=") for e in a.smem_extra)}
    flush = torch.empty(1 << 28, dtype=torch.uint8, device="cuda") if a.cold else None  # 256 MB: 5x the L2

    def cold(name):
        if name in a.cold:
            flush.add_(1)
            torch.cuda.synchronize()

    def checked(self, name, grid, block, args, shared_mem=0):
        if fill is not None and name.startswith(a.fill_smem):
            fill()
        shared_mem += extra.get(name, 0)
        if name in a.twice:  # first into a poisoned copy of its output, then as the program launches it
            spare = self.empty_like(args[0])
            torch.cuda.synchronize()
            cold(name)
            launch(self, name, grid, block, [spare, *args[1:]], shared_mem)
            torch.cuda.synchronize()
            print(f"{name} (an extra launch before): {int(torch.isnan(spare).sum())} NaN", flush=True)
        cold(name)
        if fill is not None and name.startswith(a.fill_smem) and name in a.twice:
            fill()  # before the second launch too: it would read the first's leftovers otherwise
        launch(self, name, grid, block, args, shared_mem)
        torch.cuda.synchronize()
        out = args[0]
        if a.again and name.startswith(a.again) and isinstance(out, torch.Tensor) and out.is_floating_point():
            rows = []
            for i in range(2):
                spare = self.empty_like(out)
                if i:  # the second into a sentinel, not NaN: an element left unwritten keeps it, a computed NaN does not
                    spare.fill_(SENTINEL)
                launch(self, name, grid, block, [spare, *args[1:]], shared_mem)
                torch.cuda.synchronize()
                both = torch.isfinite(spare) & torch.isfinite(out)
                rows.append(f"{float((spare - out)[both].abs().max()) if both.any() else 0.0:.3g} "
                            f"({int((torch.isnan(spare) != torch.isnan(out)).sum())} NaN apart"
                            + (f", {int((spare == SENTINEL).sum())} unwritten" if i else "") + ")")
            print(f"{name} again: max |diff| to its launch {', '.join(rows)}; {int(torch.isnan(out).sum())} NaN in it", flush=True)
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            bad = torch.isnan(out.reshape(-1)).nonzero().reshape(-1)
            where = f" at {bad[:12].tolist()} ... {bad[-4:].tolist()}" if bad.numel() else ""
            fin = out.reshape(-1)[torch.isfinite(out.reshape(-1))]
            big = f", {int(torch.isinf(out).sum())} Inf, largest finite {float(fin.abs().max()) if fin.numel() else 0.0:.3g}"
            print(f"{name} grid {grid} block {block}: {bad.numel()} of {out.numel()} NaN{big}{where}", flush=True)
            if bad.numel() and shape and out.numel() >= math.prod(shape):
                nan = torch.isnan(out.reshape(-1)[:math.prod(shape)].reshape(shape))
                for d in range(len(shape)):
                    per = nan.sum(dim=[e for e in range(len(shape)) if e != d]).tolist()
                    print(f"  dim {d}: {per[:70]}", flush=True)
    KernelAPI.launch = checked
    w = Worker()
    w.setup({"task": a.task})
    ev = Evaluation(candidate_id=cand.id, stage="probe", verdict=Verdict.crashed)
    loaded = w._load(cand, ev, {"arch": prof.arch})
    if loaded is None:
        print("not loaded:", ev.reason)
        return
    _, model = loaded
    xs = w.task.make_inputs(a.seed, "cuda")
    with torch.no_grad():
        got = model(*xs)
        want = w.ref(*xs)
    print(f"output: {int(torch.isnan(got).sum())} NaN; max abs diff to eager {float((got - want).abs().nan_to_num(0).max()):.3e}")


if __name__ == "__main__":
    main()
