"""CUTLASS's own SM90 implicit-GEMM fprop (TF32, TMA im2col, warp-specialized) beside cuDNN and the expert's
conv kernel at a task's conv shape: the measurement issue 17 asks for before choosing CUTLASS as a building block.

Here (no GPU; the headers come with the nvidia-cutlass wheel: `pip download nvidia-cutlass --no-deps`, unzip):
  nvcc -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -shared -Xcompiler -fPIC \
    -I$CUT/cutlass_library/source/include -I$CUT/cutlass_library/source/tools/util/include \
    [-DTILE_N=256] [-DCLUSTER_M=2] -o conv_t128.so benchmarks/cutlass/conv_fprop_tf32.cu
There: python3 benchmarks/cutlass/probe.py SO [SO ...] --shape N,C,H,W,K,R[,pad] [--shape ...]

Prints a JSON line a (library, shape): the kernel's median time over REPS (CUDA events), its TFLOP/s, its
error against cuDNN at full fp32 (TF32 off), cuDNN's time at TF32 on NCHW (eager's layout) and channels-last."""
from __future__ import annotations

import argparse
import ctypes
import functools
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kernel_probe import _time  # noqa: E402  (CUDA events, median)


def main() -> None:
    import torch
    import torch.nn.functional as F
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="+")
    ap.add_argument("--shape", action="append", required=True, help="N,C,H,W,K,R[,pad]")
    ap.add_argument("--reps", type=int, default=20)
    a = ap.parse_args()
    for spec in a.shape:
        n, c, h, w, k, r, *pad = (int(v) for v in spec.split(","))
        pad = pad[0] if pad else 0
        x = torch.rand(n, c, h, w, device="cuda")  # KernelBench's own draw (uniform [0, 1))
        wt = torch.empty(k, c, r, r, device="cuda").uniform_(-1, 1) / (c * r * r) ** 0.5
        flops = 2.0 * n * k * (h + 2 * pad - r + 1) * (w + 2 * pad - r + 1) * c * r * r
        torch.backends.cudnn.allow_tf32 = False
        exact = F.conv2d(x, wt, padding=pad)
        torch.backends.cudnn.allow_tf32 = True
        row = {"shape": spec, "gflop": round(flops / 1e9, 1)}
        row["cudnn_nchw_ms"] = _time(functools.partial(F.conv2d, x, wt, padding=pad), a.reps)
        xc, wc = x.to(memory_format=torch.channels_last), wt.to(memory_format=torch.channels_last)
        row["cudnn_nhwc_ms"] = _time(functools.partial(F.conv2d, xc, wc, padding=pad), a.reps)
        act, flt = x.permute(0, 2, 3, 1).contiguous(), wt.permute(0, 2, 3, 1).contiguous()
        out = torch.full((n, h + 2 * pad - r + 1, w + 2 * pad - r + 1, k), float("nan"), device="cuda")
        for lib in a.libs:
            so = ctypes.CDLL(lib)
            rc = so.cutlass_conv_setup(ctypes.c_void_p(act.data_ptr()), ctypes.c_void_p(flt.data_ptr()),
                                       ctypes.c_void_p(out.data_ptr()), n, h, w, c, k, r, r, pad)
            if rc:
                print(json.dumps({**row, "lib": lib, "error": f"setup {rc}"}))
                continue
            stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
            ms = _time(functools.partial(so.cutlass_conv_run, stream), a.reps)
            torch.cuda.synchronize()
            err = ((out.permute(0, 3, 1, 2) - exact).norm() / exact.norm()).item()
            print(json.dumps({**row, "lib": lib, "smem": so.cutlass_conv_smem(), "ms": ms, "tflops": round(flops / ms / 1e9, 1),
                              "rel_err": err}), flush=True)


if __name__ == "__main__":
    main()
