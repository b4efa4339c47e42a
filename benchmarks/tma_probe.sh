#!/bin/bash
# The warp-specialised TMA GEMM (16-bit, built blind in the seventh session): first its GPU test (staged and
# straight from the tensors, one and two consumer warpgroups, under the float64 rule), then probes beside
# eager and cuBLAS: the bundled 8192^3 bf16 matmul (the cp.async ring's best, 128x256 on 3 stages, 2.80 ms on
# the H100, against the TMA ring at 128x256 on 4 stages and 128x128 on 5) and the bundled bf16 linear (tiles
# from the tensors, cp.async against TMA). The fp32 planes GEMM by TMA too (its GPU test and level 1 task 1). About 300 s. Writes $OUT/tma_tests.txt and $OUT/tma_probe.txt.
# Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_conv.py tma_tests.txt 200 -k "tma_gemm or split_planes"
w='"wgmma":true,"BM":128'
probe tma_probe.txt tasks/suite/level1/29_matmul_bf16.py 60 --vary "{$w,\"BN\":256,\"stages\":3}" \
  --vary "{$w,\"BN\":256,\"stages\":4,\"tma\":true}" --vary "{$w,\"BN\":128,\"stages\":5,\"tma\":true}" \
  --vary "{$w,\"BM\":64,\"BN\":256,\"stages\":4,\"tma\":true}"
probe tma_probe.txt tasks/suite/level2/01_linear_relu_bf16.py 40 --vary '{}' --vary '{"tma":true,"stages":4}'

# the fp32 planes GEMM by TMA (level 1 task 1, 4096^3: the cp.async ring 1.58 ms on the H200) against its ring
p='"wgmma":true,"planes":true,"BM":128,"BN":128,"BK":32,"swz":true,"fold":4'
probe tma_probe.txt .kb/level1/1_Square_matrix_multiplication_.py 60 --vary "{$p,\"stages\":3}" \
  --vary "{$p,\"stages\":3,\"tma\":true}" --vary "{$p,\"stages\":3,\"tma\":true,\"fold\":8}"
cat "$OUT/tma_probe.txt"
