#!/bin/bash
# The warp-specialised TMA GEMM (16-bit, built blind in the seventh session): first its GPU test (staged and
# straight from the tensors, one and two consumer warpgroups, under the float64 rule), then probes beside
# eager and cuBLAS: the bundled 8192^3 bf16 matmul (the cp.async ring's best, 128x256 on 3 stages, 2.80 ms on
# the H100, against the TMA ring at 128x256 on 4 stages and 128x128 on 5) and the bundled bf16 linear (tiles
# from the tensors, cp.async against TMA). About 250 s. Writes $OUT/tma_tests.txt and $OUT/tma_probe.txt.
# Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_conv.py tma_tests.txt 150 -k "tma_gemm"
w='"wgmma":true,"BM":128'
probe tma_probe.txt tasks/suite/level1/29_matmul_bf16.py 60 --vary "{$w,\"BN\":256,\"stages\":3}" \
  --vary "{$w,\"BN\":256,\"stages\":4,\"tma\":true}" --vary "{$w,\"BN\":128,\"stages\":5,\"tma\":true}" \
  --vary "{$w,\"BM\":64,\"BN\":256,\"stages\":4,\"tma\":true}"
probe tma_probe.txt tasks/suite/level2/01_linear_relu_bf16.py 40 --vary '{}' --vary '{"tma":true,"stages":4}'
cat "$OUT/tma_probe.txt"
