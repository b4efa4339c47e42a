#!/bin/bash
# The warpgroup-MMA rings a tile further ahead (`lead`, a7a2bd5+): one device call of about 530 s. First the
# GPU tests of what failed or changed since the last call (a program in compilation units, short rows a warp
# each, a K = 32 matmul on 64x64 tiles, the bf16 linear
# with its tiles copied from the tensors; the lead/bsplit kernels' own GPU tests are benchmarks/ring_tests.sh),
# then kernel probes beside eager, each design against itself with lead or the design before: the bundled
# 8192^3 bf16 matmul (128x256 on 3 and 4 stages, 128x128 on 4), the bundled bf16 linear (tiles copied from
# the tensors against staged), level 2 task 4 (3x3 conv, 7.3 ms on the H100 against eager's 8.6 and
# torch.compile's 5.0), level 1 task 63, level 2 task 16 (transposed), level 2 task 59 (B split in the
# ring), level 1 task 9 (K 32: 64x64 tiles against 128x128) and level 1 task 81 (stride-5 transposed conv,
# phases side by side; 4.8 ms phase after phase). Writes $OUT/ring_tests.txt and $OUT/ring_probe.txt.
# Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_expert.py ring_tests.txt 150 -k "gemm_bf16 or compilation_units or short_rows or short_k"
w='"wgmma":true,"BM":128'
probe ring_probe.txt tasks/suite/level1/29_matmul_bf16.py 50 --vary "{$w,\"BN\":256,\"stages\":3}" --vary "{$w,\"BN\":256,\"stages\":3,\"lead\":true}" \
  --vary "{$w,\"BN\":256,\"stages\":4,\"lead\":true}" --vary "{$w,\"BN\":128,\"stages\":4}" --vary "{$w,\"BN\":128,\"stages\":4,\"lead\":true}"
probe ring_probe.txt tasks/suite/level2/01_linear_relu_bf16.py 40 --vary '{}' --vary '{"direct":false}' --vary '{"lead":true,"stages":4}'
probe ring_probe.txt .kb/level2/4_Conv2d_Mish_Mish.py 50 --vary '{}' --vary '{"lead":true}'
probe ring_probe.txt .kb/level1/63_conv_standard_2D__square_input__square_kernel.py 50 --vary '{}' --vary '{"lead":true}'
probe ring_probe.txt .kb/level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling.py 50 --vary '{}' --vary '{"lead":true}'
probe ring_probe.txt .kb/level2/59_Matmul_Swish_Scaling.py 50 --vary '{}' --vary '{"lead":true}'
probe ring_probe.txt .kb/level1/9_Tall_skinny_matrix_multiplication_.py 40 --vary '{}' --vary '{"BM":128,"BN":128,"WM":2,"WN":4,"stages":3}'
probe ring_probe.txt .kb/level1/81_conv_transposed_2D_asymmetric_input_square_kernel___dilated____padded____strided__.py 40 --vary '{}' --vary '{"lead":true}'
cat "$OUT/ring_probe.txt"
