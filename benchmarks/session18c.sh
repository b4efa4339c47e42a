#!/bin/bash
# tcols with a block's warps splitting one group's rows (`split`) beside tcols alone, on the dim reductions 47 and 51.
# Carry [".whl", ".kb"].
. benchmarks/probe_lib.sh
probe s.txt .kb/level1/47_Sum_reduction_over_a_dimension.py 60 --first --reps 10 --vary '{}' --vary '{"split": true}' \
  --vary '{"split": true, "block": 512}' --vary '{"split": true, "block": 128}'
probe s.txt .kb/level1/51_Argmax_over_a_dimension.py 45 --first --reps 10 --vary '{}' --vary '{"split": true}' --vary '{"split": true, "block": 512}'
cut -c1-220 "$OUT/s.txt"
