#!/bin/bash
# issue 18, seventeenth session: rows cached across a cluster with their slices copied by a ring of bulk copies (the
# next row's loads under this row's stores) beside the first design, at KernelBench's sizes (23 softmax, 24
# log-softmax, 34 instance norm, 39 L2 norm, rows off 16-byte boundaries: the ring, or clusters of more, smaller blocks); the GPU test of the ring; 1-d pools'
# outputs staged (41, 44); a Nsight Compute profile of the dim reduction's first design (47).
# Carry [".whl", ".kb"]. Rows under $OUT.
. benchmarks/probe_lib.sh
CL='"mapping": "block", "block": 1024, "cache": "cluster", "cluster": 8, "waves": 1'
probe r.txt .kb/level1/23_Softmax.py 80 --first --reps 10 --vary '{}' --vary "{$CL, \"ring\": true, \"online\": false}" \
  --vary "{$CL, \"ring\": true, \"online\": true}" --vary "{$CL, \"online\": false}"
probe r.txt .kb/level1/24_LogSoftmax.py 60 --first --reps 10 --vary '{}' --vary "{$CL, \"ring\": true, \"online\": false}" \
  --vary "{$CL, \"ring\": true, \"online\": true}"
probe r.txt .kb/level1/34_InstanceNorm.py 80 --first --reps 10 --vary '{}' --vary "{$CL, \"ring\": true}" \
  --vary "{$CL, \"ring\": true, \"welford\": false}" --vary "{$CL}"
probe r.txt .kb/level1/39_L2Norm_.py 60 --first --reps 10 --vary '{}' --vary '{"ring": true}' \
  --vary '{"cluster": 8, "block": 256, "waves": 4}' --vary '{"cluster": 4, "block": 512, "waves": 3}'
cut -c1-600 "$OUT/r.txt"
gpu_tests tests/test_gpu_conv.py gr.log 140 -k cluster_rows_on_a_ring
# the 1-d pools' first design with its outputs stored by consecutive threads through shared memory; where a dim
# reduction's thread per strided row loses time (Nsight Compute)
probe n.txt .kb/level1/44_Average_Pooling_1D.py 50 --first --reps 10 --vary '{}' --vary '{"ostage": true}'
probe n.txt .kb/level1/41_Max_Pooling_1D.py 50 --first --reps 10 --vary '{}' --vary '{"ostage": true}'
probe n.txt .kb/level1/47_Sum_reduction_over_a_dimension.py 50 --first --ncu --reps 10
cut -c1-1500 "$OUT/n.txt"
