#!/bin/bash
# issue 16, third probe: the bf16 GEMM's ping-pong consumers (persistent, 64-row tiles in turn) beside the first design
# at 4096^3, then the TMA GEMM's GPU tests. Carry [".whl"]. Output under $OUT.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
P=benchmarks/kernel_probe.py
F='^\{"name": "([^"]|\\")*", "ms": [0-9.]*|egg_[a-z_]*: [0-9.]* ms|nvjet[^:]*: [0-9.]* ms|"err": [0-9.e-]*'
run() { out=$1; shift; timeout "$@" > "$OUT/$out" 2>&1; grep -oE "$F" "$OUT/$out" | tr '\n' ' ' | sed 's/{"name"/\n{"name"/g'; echo; }
PP='"persist": true, "pingpong": true'
run p4096.txt 50 python3 $P benchmarks/gemm16/mm4096_bf16.py --first --no-compile --kernels --reps 20 --vary '{}' \
  --vary "{$PP, \"stages\": 5}" --vary "{$PP, \"stages\": 4}"
timeout 90 python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_gpu_conv.py -k "tma_gemm_verifies" > $OUT/gt.log 2>&1; tail -3 $OUT/gt.log
