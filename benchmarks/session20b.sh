#!/bin/bash
# The twentieth session's follow-up (carry [".whl", ".kb"]): where CrossEntropy's time goes (KernelBench 95: 0.41 ms,
# torch.compile 0.28, floor 0.18 on H100 in nan19): its two kernels' times and compile's (--kernels), then the row
# mapping's knobs: a warp a row (no block barriers, no serial merge of 8 warps a row), fewer waves, wider blocks.
. benchmarks/probe_lib.sh
T=.kb/level1/95_CrossEntropyLoss.py
echo "== $T" >> "$OUT/ce.txt"
timeout 150 python3 benchmarks/kernel_probe.py $T --reps 20 --kernels --first --vary '{}' --vary '{"mapping": "warp"}' \
  2>&1 | grep -v Warning | grep '^\[{"name"\|^{"name"\|Error\|error' | cut -c1-1500 >> "$OUT/ce.txt"
probe ce.txt $T 90 --first --reps 20 --vary '{"waves": 2}' --vary '{"block": 512}' --vary '{"block": 1024, "waves": 1}' \
  --vary '{"mapping": "warp", "block": 128}' --vary '{"mapping": "warp", "waves": 2}'
cut -c1-400 "$OUT/ce.txt"
# Issue 16's large-K fp32 GEMM (KernelBench 6: 256 x 256, K 2^19; 1.213 ms, eager 1.285 in prof: latency-limited,
# 244 registers, one block of 8 warps an SM): more ranges, smaller tiles (4 warps, 159-230 registers), a deeper ring
probe g6.txt .kb/level1/6_Matmul_with_large_K_dimension_.py 150 --first --reps 10 --vary '{}' --vary '{"splitk": 66}' \
  --vary '{"BM": 64, "BN": 128, "WM": 2, "WN": 2}' --vary '{"BM": 64, "BN": 64, "WM": 2, "WN": 2}' \
  --vary '{"BM": 64, "BN": 64, "WM": 2, "WN": 2, "splitk": 66}' --vary '{"stages": 4}'
cut -c1-400 "$OUT/g6.txt"
