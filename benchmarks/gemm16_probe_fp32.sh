#!/bin/bash
# issue 16, second call: the planes GEMM (3xTF32 wgmma by TMA, pair stores) on the store-bound level 1 tasks 9 and 7
# (short K: a fold of the k-tiles K has), task 1 as it runs first, then the planes' GPU tests. Carry [".whl", ".kb"].
. benchmarks/probe_lib.sh
PL='"family": "gemm_tf32", "wgmma": true, "planes": true, "BM": 128, "WM": 2, "WN": 4, "BK": 32, "stages": 3, "swz": true, "tma": true'
probe p9.txt .kb/level1/9_Tall_skinny_matrix_multiplication_.py 120 --first --kernels --vary '{}' \
  --vary "{$PL, \"BN\": 128, \"fold\": 1}" --vary "{$PL, \"BN\": 256, \"fold\": 1}"
probe p7.txt .kb/level1/7_Matmul_with_small_K_dimension_.py 120 --first --kernels --vary '{}' \
  --vary "{$PL, \"BN\": 128, \"fold\": 2}" --vary "{$PL, \"BN\": 128, \"fold\": 1}"
probe p1.txt .kb/level1/1_Square_matrix_multiplication_.py 60 --first --kernels --vary '{}'
gpu_tests tests/test_gpu_conv.py gt.log 150 -k split_planes
