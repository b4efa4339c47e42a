#!/bin/bash
# The nineteenth session's first call (left over from the eighteenth): tcols with a block's warps splitting one group's rows
# (`split`) beside tcols alone on the dim reductions 47 and 51; the pools' first designs; the NaN-keeping max/min's cost.
# Carry [".whl", ".kb"].
. benchmarks/probe_lib.sh
probe s.txt .kb/level1/47_Sum_reduction_over_a_dimension.py 60 --first --reps 10 --vary '{}' --vary '{"split": true}' \
  --vary '{"split": true, "block": 512}' --vary '{"split": true, "block": 128}'
probe s.txt .kb/level1/51_Argmax_over_a_dimension.py 45 --first --reps 10 --vary '{}' --vary '{"split": true}' --vary '{"split": true, "block": 512}'
cut -c1-220 "$OUT/s.txt"
# the pools' new first designs at e6b959e: 41 at 8 outputs a thread, 42 at 8 rows (verified against float64 by the probe)
probe s.txt .kb/level1/41_Max_Pooling_1D.py 45 --first --reps 10 --vary '{}'
probe s.txt .kb/level1/42_Max_Pooling_2D.py 45 --first --reps 10 --vary '{}'
cut -c1-220 "$OUT/s.txt" | tail -4
# the NaN-keeping max/min's cost (18f258d): ReLU, HardTanh and a conv with a ReLU epilogue, first designs (before, H100:
# 19 4.219 ms, 32 4.220 at 91b228f; level 2 task 1 1.915-1.933 at 14f8e20/28092aa)
probe s.txt .kb/level1/19_ReLU.py 40 --first --reps 10 --vary '{}'
probe s.txt .kb/level1/32_HardTanh.py 40 --first --reps 10 --vary '{}'
probe s.txt .kb/level2/1_Conv2D_ReLU_BiasAdd.py 60 --first --reps 10 --vary '{}'
cut -c1-160 "$OUT/s.txt" | tail -6
