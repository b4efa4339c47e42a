#!/bin/bash
# issue 16, third probe: the bf16 GEMM's ping-pong consumers (persistent, 64-row tiles in turn) beside the first design
# at 4096^3, then the TMA GEMM's GPU tests (ping-pong among them). Carry [".whl"]. Rows under $OUT.
. benchmarks/probe_lib.sh
PP='"persist": true, "pingpong": true'
probe p4096.txt benchmarks/gemm16/mm4096_bf16.py 50 --first --kernels --reps 20 --vary '{}' --vary "{$PP, \"stages\": 5}" --vary "{$PP, \"stages\": 4}"
cat "$OUT/p4096.txt"
gpu_tests tests/test_gpu_conv.py gt.log 90 -k tma_gemm_verifies
