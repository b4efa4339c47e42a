#!/bin/bash
# issue 16's probes, one device call: bf16 GEMM variants at 8192^3 and 4096^3 beside cuBLAS, the store-bound fp32 GEMMs
# (level 1 tasks 9 and 7) by tile, then the TMA GEMM's GPU tests. Output under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
P=benchmarks/kernel_probe.py
F='^\{"name": "([^"]|\\")*", "ms": [0-9.]*|egg_[a-z_]*: [0-9.]* ms|nvjet[^:]*: [0-9.]* ms|"err": [0-9.e-]*'
run() { out=$1; shift; timeout "$@" > "$OUT/$out" 2>&1; grep -oE "$F" "$OUT/$out" | tr '\n' ' ' | sed 's/{"name"/\n{"name"/g'; echo; }
run p29.txt 240 python3 $P tasks/suite/level1/29_matmul_bf16.py --first --no-compile --kernels --reps 20 --vary '{}' --vary '{"bchunks": true}' \
  --vary '{"bchunks": true, "persist": true}' --vary '{"persist": true}' --vary '{"direct": false}' --vary '{"direct": false, "persist": true}'
run p4096.txt 120 python3 $P benchmarks/gemm16/mm4096_bf16.py --first --no-compile --kernels --reps 20 --vary '{}' --vary '{"persist": true}' \
  --vary '{"bchunks": true}' --vary '{"bchunks": true, "persist": true}'
for t in 9_Tall_skinny_matrix_multiplication_ 7_Matmul_with_small_K_dimension_; do
  run p$t.txt 150 python3 $P .kb/level1/$t.py --first --no-compile --reps 10 --vary '{}' --vary '{"BM": 128, "BN": 128, "WM": 2, "WN": 4}' \
    --vary '{"BM": 128, "BN": 64, "WM": 4, "WN": 2}' --vary '{"BM": 64, "BN": 128, "WM": 2, "WN": 4}'
done
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_conv.py -k "tma_gemm_verifies" > $OUT/gt.log 2>&1; tail -3 $OUT/gt.log
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_expert.py -k "bf16" > $OUT/ge.log 2>&1; tail -3 $OUT/ge.log
