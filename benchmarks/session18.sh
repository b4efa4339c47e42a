#!/bin/bash
# The eighteenth session's first device call: the 2-d/3-d pools' rows of outputs a thread (42 first design, beside
# rows 1 and unstaged; 46 with rows 2/4), the GPU first-candidate tests of the staged pool and BatchNorm's vectors,
# a Nsight Compute look at a dim reduction (47), then the mem17 bench (pools 41-46, BatchNorm 33, conv+BN 52).
# Carry [".whl", ".kb", ".kbr", "bench_state"]; rows under $OUT (r.txt, g.log, n.txt, mem17/). pool2 in the next call:
# BENCH_NAME=pool2 BENCH_PATHS=.kbr/pool2 CPS=1 REPS=10 KB_SECONDS=230 bash benchmarks/kb_device.sh --total-candidates 1 --no-profile
. benchmarks/probe_lib.sh
probe r.txt .kb/level1/42_Max_Pooling_2D.py 70 --first --reps 10 --vary '{}' --vary '{"ostage": false}' --vary '{"rows": 1}' \
  --vary '{"rows": 1, "ostage": false}' --vary '{"rows": 2}'
probe r.txt .kb/level1/46_Average_Pooling_3D.py 60 --first --reps 10 --vary '{}' --vary '{"rows": 2, "ostage": false}' \
  --vary '{"rows": 4, "ostage": false}'
cut -c1-400 "$OUT/r.txt"
gpu_tests tests/test_gpu_expert.py g.log 110 -k "pool_staged or bn_grid"
timeout 100 python3 benchmarks/kernel_probe.py .kb/level1/47_Sum_reduction_over_a_dimension.py --first --ncu --reps 5 > "$OUT/n.txt" 2>&1
tail -c 3000 "$OUT/n.txt"
BENCH_NAME=mem17 BENCH_PATHS=.kbr/mem17 CPS=1 REPS=10 KB_SECONDS=${MEM_S:-170} bash benchmarks/kb_device.sh --total-candidates 1 --no-profile
