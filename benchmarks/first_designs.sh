#!/bin/bash
# The first designs of 2026-12-05 on the lent GPU, one device call of about 500 s: their GPU tests (the bf16
# warpgroup-MMA GEMM, the fp32 planes GEMM over a batch, the swizzled wgmma conv, a program cut into
# compilation units), then kernel probes beside
# eager: the bundled 8192^3 bf16 matmul (wgmma at two tile widths, mma.sync), level 1 task 3
# (planes over a batch against mma.sync), level 2 task 59 (B split in the ring against mma.sync and
# both planes), level 2 task 12 (M = 1024: planes against B split in the ring), and under ncu level 1 task 87 (1x1 conv: 7.0 ms against eager's 3.5)
# Writes $OUT/first_tests.txt and $OUT/first_probe.txt.
# Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_expert.py first_tests.txt 200 -k "gemm_bf16 or matmul_bf16 or planes_bmm or gemm_bsplit or conv_wgmma or compilation_units"
w='"wgmma":true,"BM":128,"stages":4'
probe first_probe.txt tasks/suite/level1/29_matmul_bf16.py 70 --vary "{$w,\"BN\":128}" --vary '{"wgmma":false,"BM":64,"BN":64,"WM":2,"WN":2,"stages":1,"pad":8}' \
  --vary "{$w,\"BN\":256,\"stages\":3}"
probe first_probe.txt .kb/level1/3_Batched_matrix_multiplication.py 60 --vary '{}' \
  --vary '{"family":"gemm_tf32","BM":128,"BN":128,"WM":2,"WN":4,"stages":3,"wgmma":false,"planes":false}'
p='"family":"gemm_tf32","BM":128,"BN":128,"WM":2,"WN":4'
probe first_probe.txt .kb/level2/59_Matmul_Swish_Scaling.py 80 --vary '{}' --vary "{$p,\"stages\":3,\"wgmma\":false,\"planes\":false}" \
  --vary '{"bsplit":false}' --vary '{"BN":64,"stages":4}'
probe first_probe.txt .kb/level2/12_Gemm_Multiply_LeakyReLU.py 60 --vary '{}' --vary '{"bsplit":true}'
probe first_probe.txt .kb/level1/87_conv_pointwise_2D.py 80 --ncu --vary '{}'
cat "$OUT/first_probe.txt"
