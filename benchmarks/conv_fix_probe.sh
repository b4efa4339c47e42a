#!/bin/bash
# After the launch fix (every dynamic shared size opted into, 2b60e53): the GPU test of every conv layout again
# (10 cases failed to launch the 3-stage 64x64 wgmma ring before it) and of the whole-K conv (conv_short: short K
# whole in shared memory, a persistent block walking pixel tiles), the first candidates of the GEMM families and
# the direct-first conv; then probes of the whole-K conv against the first designs at K 72 (level 2 tasks 57 and
# 65, 3x3 over 8 channels: 3xTF32 mma.sync 1.06 ms on task 57 on the H100, 0.14 ms of bytes) and K 216 (task 90),
# the 32-wide wgmma tile (level 1 task 78), the grid's vectors (level 1 task 37) and the planes by TMA (level 2
# task 12). Writes $OUT/fix_*.txt. Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_conv.py fix_conv_tests.txt 200 -k "every_layout or whole_k"
gpu_tests tests/test_gpu_runtime.py fix_tf32_tests.txt 60 -s -k "tf32_off"
gpu_tests tests/test_gpu_expert.py fix_first_tests.txt 150 -k "conv_direct_first or conv_wgmma or gemm_bf16 or matmul_bf16 or planes_bmm or gemm_bsplit or grid_vec or grid_loss"
W='"wgmma":false,"swz":false,"whole":true'
probe fix_probe.txt .kb/level2/57_Conv2d_ReLU_HardSwish.py 60 --vary '{"wgmma":false,"swz":false,"split":3}' \
  --vary "{$W,\"split\":3,\"BM\":128,\"BN\":64,\"WM\":2,\"WN\":4}" --vary "{$W,\"split\":1,\"BM\":128,\"BN\":64,\"WM\":2,\"WN\":4}" --vary '{}'
probe fix_probe.txt .kb/level2/90_Conv3d_LeakyReLU_Sum_Clamp_GELU.py 60 --vary '{"wgmma":false,"swz":false,"split":3}' \
  --vary "{$W,\"split\":3,\"BM\":64,\"BN\":64,\"WM\":2,\"WN\":4}" --vary "{$W,\"split\":1,\"BM\":64,\"BN\":64,\"WM\":2,\"WN\":4}"
probe fix_probe.txt .kb/level2/65_Conv2d_AvgPool_Sigmoid_Sum.py 60 --vary '{"wgmma":false,"swz":false,"split":3}' \
  --vary "{$W,\"split\":3,\"BM\":128,\"BN\":64,\"WM\":2,\"WN\":4}"
# Mish by one expf (egg_mish) in the epilogue of a 1.06e9-output conv: 7.3 ms of conv at da39c3f on the H100
probe fix_probe.txt .kb/level2/4_Conv2d_Mish_Mish.py 40 --vary '{}'
probe fix_probe.txt .kb/level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py 40 --vary '{}' \
  --vary '{"wgmma":true,"swz":true,"BM":128,"BN":32,"stages":3}'
# level 1 task 37's grid passes in 16-byte vectors (scalar at 39304f7 on the H200: 7.88 ms against eager 7.01)
probe fix_probe.txt .kb/level1/37_FrobeniusNorm_.py 40 --vary '{}' --vary '{"vec":1}'
# the (1024, 8192) linears now start on the planes by TMA (B split in the ring before: 1.66 ms at d581a70)
probe fix_probe.txt .kb/level2/12_Gemm_Multiply_LeakyReLU.py 40 --vary '{}' --vary '{"bsplit":true,"tma":false}'
cut -c1-250 "$OUT/fix_probe.txt"
