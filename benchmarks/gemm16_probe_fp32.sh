#!/bin/bash
# issue 16, second call: the planes GEMM (3xTF32 wgmma by TMA, pair stores) on the store-bound level 1 tasks 9 and 7
# (short K: a fold of the k-tiles K has), task 1 as it runs first, then the planes' GPU tests. Output under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
P=benchmarks/kernel_probe.py
F='^\{"name": "([^"]|\\")*", "ms": [0-9.]*|egg_[a-z_]*: [0-9.]* ms|"err": [0-9.e-]*'
run() { out=$1; shift; timeout "$@" > "$OUT/$out" 2>&1; grep -oE "$F" "$OUT/$out" | tr '\n' ' ' | sed 's/{"name"/\n{"name"/g'; echo; }
PL='"family": "gemm_tf32", "wgmma": true, "planes": true, "BM": 128, "WM": 2, "WN": 4, "BK": 32, "stages": 3, "swz": true, "tma": true'
run p9.txt 120 python3 $P .kb/level1/9_Tall_skinny_matrix_multiplication_.py --first --no-compile --kernels --reps 10 --vary '{}' \
  --vary "{$PL, \"BN\": 128, \"fold\": 1}" --vary "{$PL, \"BN\": 256, \"fold\": 1}"
run p7.txt 120 python3 $P .kb/level1/7_Matmul_with_small_K_dimension_.py --first --no-compile --kernels --reps 10 --vary '{}' \
  --vary "{$PL, \"BN\": 128, \"fold\": 2}" --vary "{$PL, \"BN\": 128, \"fold\": 1}"
run p1.txt 60 python3 $P .kb/level1/1_Square_matrix_multiplication_.py --first --no-compile --kernels --reps 10 --vary '{}'
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_conv.py -k "split_planes" > $OUT/gt.log 2>&1; tail -3 $OUT/gt.log
