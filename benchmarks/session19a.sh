#!/bin/bash
# The nineteenth session's first call: the NaN rule on the GPU against eager CUDA (first designs of the families the
# eighteenth session changed, the online softmax), the verifier's NaN trial, the pools' cols mapping, then
# benchmarks/session18c.sh's probes (tcols split, the pools' first designs, the NaN-keeping max/min's cost).
# Carry [".whl", ".kb"].
. benchmarks/probe_lib.sh
gpu_tests tests/test_nan_semantics.py nan.txt 150
gpu_tests tests/test_gpu_verifier.py verifier.txt 150 -k "nan or honest or kernelbench_rule or copy_passes"
# pools' cols mapping (a block an output row reducing columns): 45's new first design beside a thread an output (the
# old first: 6.90 ms in the ef32038 bench, eager 6.55); 43 and 46 beside their first designs
probe s.txt .kb/level1/45_Average_Pooling_2D.py 60 --first --reps 10 --vary '{}' --vary '{"block": 256}' \
  --vary '{"block": 1024}' --vary '{"cols": false, "block": 256}'
probe s.txt .kb/level1/43_Max_Pooling_3D.py 45 --first --reps 10 --vary '{}' --vary '{"cols": true, "vec": 1, "block": 256}'
probe s.txt .kb/level1/46_Average_Pooling_3D.py 45 --first --reps 10 --vary '{}' \
  --vary '{"cols": true, "vec": 1, "ostage": false, "block": 256}'
cut -c1-200 "$OUT/s.txt" | tail -12
bash benchmarks/session18c.sh
