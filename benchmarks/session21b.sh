#!/bin/bash
# For an H200 call (needs_h200: the L1/L2 norms' float64 truth, 32768 x 65535, does not fit an H100's 80 GB beside the
# inputs; carry [".whl", ".kb"]). Level 1 38/39 at 72% of the floor (nan19: a cluster of 2 blocks of 1024 a row): the
# cluster's size and the blocks' width, the row held on chip so it is read once.
. benchmarks/probe_lib.sh
for t in 38_L1Norm_ 39_L2Norm_; do
  probe n.txt .kb/level1/$t.py 200 --first --reps 10 --vary '{}' --vary '{"cluster": 8, "block": 256, "waves": 4}' \
    --vary '{"cluster": 4, "block": 512, "waves": 2}' --vary '{"cluster": 2, "block": 1024, "waves": 2}'
done
cut -c1-300 "$OUT/n.txt"
