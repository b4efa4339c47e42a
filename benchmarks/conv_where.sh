#!/bin/bash
# Where the level-2 convs that trail torch.compile most spend their time (da39c3f, H100: task 34 8.58 ms against
# compile's 2.52, task 3 8.78 against 2.97, 91 5.65 against 2.08, 36 2.18 against 0.61, 4 8.20 against 4.96):
# eager's and Inductor's CUDA kernels (torch.profiler: which cuDNN algorithm, what Triton fused), and our first
# design's kernels under Nsight Compute. Writes $OUT/where.txt. Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
for t in 34_ConvTranspose3d_LayerNorm_GELU_Scaling 3_ConvTranspose3d_Sum_LayerNorm_AvgPool_GELU \
    91_ConvTranspose2d_Softmax_BiasAdd_Scaling_Sigmoid 36_ConvTranspose2d_Min_Sum_GELU_Add 4_Conv2d_Mish_Mish; do
  echo "== $t" >> "$OUT/where.txt"
  timeout ${WHERE_SECONDS:-110} python3 benchmarks/kernel_probe.py .kb/level2/$t.py --reps 10 --kernels --ncu --vary '{}' 2>&1 \
    | grep -v Warning | grep '^\[{"name"\|^{"name"\|Error\|error' | cut -c1-2500 >> "$OUT/where.txt"
done
cut -c1-1200 "$OUT/where.txt"
