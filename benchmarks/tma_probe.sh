#!/bin/bash
# The warp-specialised TMA kernels, built blind in the seventh session (no GPU was lent): the 16-bit GEMM, the fp32
# planes GEMM and the conv (stride 1, and transposed by phase). First their GPU tests under the float64 rule (the GEMMs staged and straight from
# the tensors, one and two consumer warpgroups; the conv at awkward shapes, 1-d to 3-d), then probes, each beside the
# cp.async design it is offered with and eager: the bundled 8192^3 bf16 matmul (128x256 on 3 stages: 2.80 ms on the
# H100; cuBLAS 1.41), the bundled bf16 linear, level 1 task 1 (fp32 4096^3 on the planes), level 2 task 4 (3x3,
# 64 -> 128 channels at 254^2: 7.3 ms on the H100 against torch.compile's 5.0), level 1 task 63 (16 channels: the
# box is half zeros), level 2 task 47 (3-d) and 16 (transposed, by phase). At most 520 s (the timeouts). Writes $OUT/tma_tests.txt and $OUT/tma_probe.txt.
# Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_conv.py tma_tests.txt 200 -k "tma_gemm or split_planes or tma_conv"
w='"wgmma":true,"BM":128'
probe tma_probe.txt tasks/suite/level1/29_matmul_bf16.py 60 --vary "{$w,\"BN\":256,\"stages\":3}" \
  --vary "{$w,\"BN\":256,\"stages\":4,\"tma\":true}" --vary "{$w,\"BN\":128,\"stages\":5,\"tma\":true}" \
  --vary "{$w,\"BM\":64,\"BN\":256,\"stages\":4,\"tma\":true}" --vary "{$w,\"BN\":256,\"stages\":4,\"tma\":true,\"persist\":true}"
probe tma_probe.txt tasks/suite/level2/01_linear_relu_bf16.py 40 --vary '{}' --vary '{"tma":true,"stages":4}' \
  --vary '{"tma":true,"stages":4,"persist":true}'

# the fp32 planes GEMM by TMA (level 1 task 1, 4096^3: the cp.async ring 1.58 ms on the H200) against its ring
p='"wgmma":true,"planes":true,"BM":128,"BN":128,"BK":32,"swz":true,"fold":4'
probe tma_probe.txt .kb/level1/1_Square_matrix_multiplication_.py 50 --vary "{$p,\"stages\":3}" \
  --vary "{$p,\"stages\":3,\"tma\":true}" --vary "{$p,\"stages\":3,\"tma\":true,\"fold\":8}"
# the conv by TMA against the cp.async ring it is offered beside (the first design's knobs, tma added)
probe tma_probe.txt .kb/level2/4_Conv2d_Mish_Mish.py 50 --vary '{}' --vary '{"tma":true,"stages":4}' --vary '{"tma":true,"stages":6}' \
  --vary '{"tma":true,"stages":4,"persist":true}'
probe tma_probe.txt .kb/level1/63_conv_standard_2D__square_input__square_kernel.py 40 --vary '{}' --vary '{"tma":true,"stages":4}'
probe tma_probe.txt .kb/level2/47_Conv3d_Mish_Tanh.py 40 --vary '{}' --vary '{"tma":true,"stages":4}'
probe tma_probe.txt .kb/level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py 40 --vary '{}' --vary '{"tma":true,"stages":4}' \
  --vary '{"tma":true,"stages":4,"persist":true}'
cat "$OUT/tma_probe.txt"
