#!/bin/bash
# issue 16, sixteenth session's (not yet run): the bf16 GEMM with B multicast on the persistent tile loop beside the first
# design (4096^3, 8192^3, the bundled batched and odd shapes), then the TMA GEMM's GPU tests (persistent multicast among
# them), then task 7's narrower planes tiles (two blocks an SM). Carry [".whl", ".kb"]. Rows under $OUT.
. benchmarks/probe_lib.sh
PM='"persist": true, "mcast": true'
probe t.txt benchmarks/gemm16/mm4096_bf16.py 70 --first --kernels --reps 20 --vary '{}' --vary "{$PM}" --vary "{$PM, \"stages\": 3}"
probe t.txt tasks/suite/level1/29_matmul_bf16.py 60 --first --kernels --reps 20 --vary '{}' --vary "{$PM}"
probe t.txt tasks/suite/level1/30_bmm_bf16.py 50 --first --kernels --reps 20 --vary '{}' --vary "{$PM}"
probe t.txt tasks/suite/level1/32_matmul_bf16_odd.py 50 --first --kernels --reps 20 --vary '{}' --vary "{$PM}"
cat "$OUT/t.txt" | cut -c1-400
gpu_tests tests/test_gpu_conv.py gt.log 150 -k tma_gemm_verifies
probe t7.txt .kb/level1/7_Matmul_with_small_K_dimension_.py 80 --first --kernels --reps 10 --vary '{}' --vary '{"BM": 64, "BN": 64}' --vary '{"BM": 64}'
cat "$OUT/t7.txt" | cut -c1-400
