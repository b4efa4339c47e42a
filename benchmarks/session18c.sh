#!/bin/bash
# tcols with a block's warps splitting one group's rows (`split`) beside tcols alone, on the dim reductions 47 and 51.
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
