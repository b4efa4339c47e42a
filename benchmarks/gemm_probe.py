"""GEMM kernel variants of the expert side by side with eager on one KernelBench task, on the GPU:
time (median of REPS, CUDA events), TFLOP/s and the norm-wise error of each against a float64 truth.
With --ncu NAME it instead runs only the named variant a few times (for `ncu -k egg_gemm`).

  python3 benchmarks/gemm_probe.py .kb/level1/1_Square_matrix_multiplication_.py [--reps 20] [--ncu V]"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

VARIANTS = {  # name: (path, knobs)
    "tf32x3_wgmma_128x128_s3": ("tf32x3", dict(BM=128, BN=128, stages=3, wgmma=True)),
    "tf32x3_wgmma_128x64_s3": ("tf32x3", dict(BM=128, BN=64, stages=3, wgmma=True)),
    "tf32x3_wgmma_256x64_s3": ("tf32x3", dict(BM=256, BN=64, stages=3, wgmma=True)),
    "tf32x3_128x128_w2x4_s3": ("tf32x3", dict(BM=128, BN=128, WM=2, WN=4, stages=3)),
    "tf32x3_128x128_w2x4_s3_ldm": ("tf32x3", dict(BM=128, BN=128, WM=2, WN=4, stages=3, ldm=True)),
    "tf32x3_128x128_w4x2_s3_ldm": ("tf32x3", dict(BM=128, BN=128, WM=4, WN=2, stages=3, ldm=True)),
    "tf32x3_128x128_w4x2_s3": ("tf32x3", dict(BM=128, BN=128, WM=4, WN=2, stages=3)),
    "tf32x3_128x128_w4x4_s3": ("tf32x3", dict(BM=128, BN=128, WM=4, WN=4, stages=3)),
    "tf32x3_128x128_w2x4_s4": ("tf32x3", dict(BM=128, BN=128, WM=2, WN=4, stages=4)),
    "tf32x3_128x64_w2x2_s3_ldm": ("tf32x3", dict(BM=128, BN=64, WM=2, WN=2, stages=3, ldm=True)),
    "simt_128x128x32": ("simt", dict(BM=128, BN=128, BK=32, TM=8, TN=8, pad=4)),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--ncu", default="")
    a = ap.parse_args()
    import cupy
    import numpy as np
    import torch

    from agents.expert.opgraph import export_graph
    from agents.expert.templates import gemm, gemm_tf32
    from runtime.compile import load_module
    from tasks import load_task
    task = load_task(a.task)
    g = export_graph(task)
    plan = gemm.plan_gemm(g)
    xs = task.make_inputs(1, "cuda")
    model = task.make_model(42).cuda()
    truth = model.double()(*[x.double() for x in xs]).float() if not a.ncu else None
    model = model.float()
    flops = 2.0 * plan.batch * plan.M * plan.N * plan.K

    def timed(fn) -> float:
        from benchmarks.kernel_probe import _time
        return _time(fn, a.reps)

    def err(y) -> float:
        return float((y.double() - truth.double()).norm() / truth.double().norm())

    rows = []
    if not a.ncu:
        y = model(*xs)
        rows.append({"name": "eager", "ms": timed(lambda: model(*xs)), "err": err(y)})
    for name, (path, kn) in VARIANTS.items():
        if a.ncu and name != a.ncu:
            continue
        k = gemm.GemmKnobs(**kn)
        src = gemm_tf32.render(g, plan, k) if path == "tf32x3" else gemm.render_simt(g, plan, k)
        smem = (gemm_tf32.shared_bytes_wgmma3(plan, k) if k.wgmma else gemm_tf32.shared_bytes(plan, k)) if path == "tf32x3" else 0
        mod, res = load_module(src, ["egg_gemm"], ["-lineinfo"], "sm_90a")
        if mod is None:
            rows.append({"name": name, "error": res.log[-400:]})
            continue
        fn = mod.get_function("egg_gemm")
        if smem > 48 * 1024:
            fn.max_dynamic_shared_size_bytes = smem
        out = torch.empty(tuple(g.output.shape), device="cuda")
        args = [out] + [x for x in xs]
        grid = gemm_tf32.grid(plan, k) if path == "tf32x3" else gemm.grid(plan, k)
        block = (k.threads(path != "simt"),)

        ptrs = tuple(np.uint64(t.data_ptr()) for t in args)
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)

        def run(fn=fn, grid=grid, block=block, ptrs=ptrs, smem=smem, stream=stream):
            with stream:
                fn(grid, block, ptrs, shared_mem=smem)
        if a.ncu:
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            continue
        out.fill_(float("nan"))
        run()
        torch.cuda.synchronize()
        rows.append({"name": name, "ms": timed(run), "err": err(out), "regs": res.resources[0].registers})
    for r in rows:
        if "ms" in r:
            r["tflops"] = flops / r["ms"] / 1e9
    print(json.dumps({"task": a.task, "M": plan.M, "N": plan.N, "K": plan.K, "batch": plan.batch, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
