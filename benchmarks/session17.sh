#!/bin/bash
# The seventeenth session's one device call (the machines were scarce): the rows' ring of bulk copies at KernelBench
# sizes (23 softmax, 39 L2 norm off 16-byte boundaries, 34 instance norm) beside the first design, the 1-d pools' staged
# outputs (44, 41), the ring's GPU test, then the persistent multicast bf16 GEMM at 4096^3 (benchmarks/gemm16_mcast.sh's
# first line). Carry [".whl", ".kb"]. Rows under $OUT.
. benchmarks/probe_lib.sh
CL='"mapping": "block", "block": 1024, "cache": "cluster", "cluster": 8, "waves": 1'
probe r.txt .kb/level1/23_Softmax.py 80 --first --reps 10 --vary '{}' --vary "{$CL, \"ring\": true, \"online\": false}" \
  --vary "{$CL, \"ring\": true, \"online\": true}"
probe r.txt .kb/level1/39_L2Norm_.py 60 --first --reps 10 --vary '{}' --vary '{"ring": true}' \
  --vary '{"cluster": 8, "block": 256, "waves": 4}'
probe r.txt .kb/level1/44_Average_Pooling_1D.py 45 --first --reps 10 --vary '{}' --vary '{"ostage": true}'
probe r.txt .kb/level1/41_Max_Pooling_1D.py 45 --first --reps 10 --vary '{}' --vary '{"ostage": true}'
probe r.txt .kb/level1/34_InstanceNorm.py 70 --first --reps 10 --vary '{}' --vary "{$CL, \"ring\": true}" \
  --vary "{$CL, \"ring\": true, \"welford\": false}"
cut -c1-600 "$OUT/r.txt"
gpu_tests tests/test_gpu_conv.py gr.log 120 -k cluster_rows_on_a_ring
PM='"persist": true, "mcast": true'
probe t.txt benchmarks/gemm16/mm4096_bf16.py 60 --first --kernels --reps 20 --vary '{}' --vary "{$PM}"
cut -c1-600 "$OUT/t.txt"
