#!/bin/bash
# issue 18, seventeenth session: rows cached across a cluster with their slices copied by a ring of bulk copies (the
# next row's loads under this row's stores) beside the first design, at KernelBench's sizes (23 softmax, 24
# log-softmax, 34 instance norm, 38/39 L1/L2 norms: clusters of more, smaller blocks); the GPU test of the ring.
# Carry [".whl", ".kb"]. Rows under $OUT.
. benchmarks/probe_lib.sh
CL='"mapping": "block", "block": 1024, "cache": "cluster", "cluster": 8, "waves": 1'
probe r.txt .kb/level1/23_Softmax.py 90 --first --reps 10 --vary '{}' --vary "{$CL, \"ring\": true, \"online\": false}" \
  --vary "{$CL, \"ring\": true, \"online\": true}" --vary "{$CL, \"online\": false}"
probe r.txt .kb/level1/24_LogSoftmax.py 70 --first --reps 10 --vary '{}' --vary "{$CL, \"ring\": true, \"online\": false}" \
  --vary "{$CL, \"ring\": true, \"online\": true}"
probe r.txt .kb/level1/34_InstanceNorm.py 90 --first --reps 10 --vary '{}' --vary "{$CL, \"ring\": true}" \
  --vary "{$CL, \"ring\": true, \"welford\": false}" --vary "{$CL}"
probe r.txt .kb/level1/39_L2Norm_.py 70 --first --reps 10 --vary '{}' --vary '{"cluster": 8, "block": 256, "waves": 4}' \
  --vary '{"cluster": 4, "block": 512, "waves": 3}'
cut -c1-600 "$OUT/r.txt"
gpu_tests tests/test_gpu_conv.py gr.log 150 -k cluster_rows_on_a_ring
