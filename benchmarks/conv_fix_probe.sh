#!/bin/bash
# After the launch fix (every dynamic shared size opted into, 2b60e53): the GPU test of every conv layout again
# (10 cases failed to launch the 3-stage 64x64 wgmma ring before it; planes, 32-wide tile, transposed convs on the
# lean gather among the variants), the first candidates of the GEMM families and the direct-first conv, then
# probes: level 2 tasks 6 and 79 (direct conv first now; 1.38 and 1.47 ms at da39c3f), level 1 task 78 (32
# channels: mma.sync first, the 32-wide wgmma tile beside it), level 2 task 12 (planes by TMA against B split in the
# ring). Writes $OUT/fix_*.txt. Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_conv.py fix_conv_tests.txt 120 -k "every_layout"
gpu_tests tests/test_gpu_expert.py fix_first_tests.txt 150 -k "conv_direct_first or conv_wgmma or gemm_bf16 or matmul_bf16 or planes_bmm or gemm_bsplit or grid_vec or grid_loss"
probe fix_probe.txt .kb/level2/6_Conv3d_Softmax_MaxPool_MaxPool.py 30 --vary '{}'
probe fix_probe.txt .kb/level2/79_Conv3d_Multiply_InstanceNorm_Clamp_Multiply_Max.py 30 --vary '{}'
probe fix_probe.txt .kb/level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__.py 40 --vary '{}' \
  --vary '{"wgmma":true,"swz":true,"BM":128,"BN":32,"stages":3}'
# level 1 task 37's grid passes in 16-byte vectors (scalar at 39304f7 on the H200: 7.88 ms against eager 7.01)
probe fix_probe.txt .kb/level1/37_FrobeniusNorm_.py 40 --vary '{}' --vary '{"vec":1}'
# the (1024, 8192) linears now start on the planes by TMA (B split in the ring before: 1.66 ms at d581a70)
probe fix_probe.txt .kb/level2/12_Gemm_Multiply_LeakyReLU.py 40 --vary '{}' --vary '{"bsplit":true,"tma":false}'
# where level 2 task 57's time goes (3xTF32 mma.sync 1.06 ms on the H100 against a floor of 0.14 ms of bytes and
# 0.11 ms of three TF32 products): each design's kernels and profile under Nsight Compute
probe fix_ncu.txt .kb/level2/57_Conv2d_ReLU_HardSwish.py 150 --ncu --vary '{"wgmma":false,"swz":false,"split":3}' \
  --vary '{}' --vary '{"algo":"direct","block":256,"waves":8,"ocb":8}'
cut -c1-250 "$OUT/fix_probe.txt"; cut -c1-1500 "$OUT/fix_ncu.txt"
