"""Run a generated kernel on the CPU: the CUDA source compiled as plain C++ (g++), every block and
thread of the launch run one after another. Only for kernels without barriers, shuffles or shared
memory (pointwise, pooling): enough to check index math and semantics against PyTorch on a machine
with no GPU. The GPU's verifier stays the judge; this catches a wrong window early."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import torch

from agents.expert.codegen import PRELUDE

CPU_PRELUDE = r"""#include <cmath>
#include <cstdio>
#include <cstdlib>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __restrict__
struct EmuDim { long long x = 0, y = 0, z = 0; };
static EmuDim blockIdx, threadIdx, blockDim, gridDim;
inline float to_f(float x) { return x; }
inline float to_f(bool x) { return x ? 1.0f : 0.0f; }
template <typename T> inline T from_f(float x);
template <> inline float from_f<float>(float x) { return x; }
"""


def available() -> bool:
    return shutil.which("g++") is not None


def run(src: str, kernel: str, grid: int, block: int, out_shape, inputs: list[torch.Tensor], workdir: Path) -> torch.Tensor:
    """float32 in, float32 out; `inputs` in the kernel's argument order after `out`."""
    body = src.replace(PRELUDE, "")
    params = ", ".join(f"(const float*)ins[{i}]" for i in range(len(inputs)))
    driver = f"""
int main(int argc, char** argv) {{
    const int n_in = {len(inputs)};
    void* ins[{max(1, len(inputs))}];
    long long n_out = {int(np.prod(out_shape))}LL;
    for (int i = 0; i < n_in; ++i) {{
        FILE* f = fopen(argv[2 + i], "rb"); fseek(f, 0, SEEK_END); long sz = ftell(f); fseek(f, 0, SEEK_SET);
        ins[i] = malloc(sz); fread(ins[i], 1, sz, f); fclose(f);
    }}
    float* out = (float*)malloc(n_out * sizeof(float));
    gridDim.x = {grid}; blockDim.x = {block};
    for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x)
        for (threadIdx.x = 0; threadIdx.x < blockDim.x; ++threadIdx.x)
            {kernel}(out{", " + params if params else ""});
    FILE* f = fopen(argv[1], "wb"); fwrite(out, sizeof(float), n_out, f); fclose(f);
    return 0;
}}
"""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "k.cpp").write_text(CPU_PRELUDE + body + driver)
    subprocess.run(["g++", "-O1", "-std=c++17", "-o", str(workdir / "k"), str(workdir / "k.cpp")], check=True,
                   capture_output=True, text=True)
    files = []
    for i, x in enumerate(inputs):
        p = workdir / f"in{i}.bin"
        x.contiguous().numpy().astype(np.float32).tofile(p)
        files.append(str(p))
    subprocess.run([str(workdir / "k"), str(workdir / "out.bin"), *files], check=True)
    return torch.from_numpy(np.fromfile(workdir / "out.bin", dtype=np.float32).reshape(out_shape))
