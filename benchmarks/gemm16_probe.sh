#!/bin/bash
# issue 16's probes, one device call: bf16 GEMM variants at 8192^3 and 4096^3 beside cuBLAS, the store-bound fp32 GEMMs
# (level 1 tasks 9 and 7) by tile, then the TMA GEMM's GPU tests. Carry [".whl", ".kb"]. Rows under $OUT.
. benchmarks/probe_lib.sh
probe p29.txt tasks/suite/level1/29_matmul_bf16.py 240 --first --kernels --reps 20 --vary '{}' --vary '{"bchunks": true}' \
  --vary '{"bchunks": true, "persist": true}' --vary '{"persist": true}' --vary '{"direct": false}' --vary '{"direct": false, "persist": true}'
probe p4096.txt benchmarks/gemm16/mm4096_bf16.py 120 --first --kernels --reps 20 --vary '{}' --vary '{"persist": true}' \
  --vary '{"bchunks": true}' --vary '{"bchunks": true, "persist": true}'
for t in 9_Tall_skinny_matrix_multiplication_ 7_Matmul_with_small_K_dimension_; do
  probe "p$t.txt" ".kb/level1/$t.py" 150 --first --vary '{}' --vary '{"BM": 128, "BN": 128, "WM": 2, "WN": 4}' \
    --vary '{"BM": 128, "BN": 64, "WM": 4, "WN": 2}' --vary '{"BM": 64, "BN": 128, "WM": 2, "WN": 4}'
done
gpu_tests tests/test_gpu_conv.py gt.log 150 -k tma_gemm_verifies
gpu_tests tests/test_gpu_expert.py ge.log 200 -k bf16
