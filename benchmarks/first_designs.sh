#!/bin/bash
# The first designs of 2026-12-05 on the lent GPU, one device call of about 500 s: their GPU tests (the bf16
# warpgroup-MMA GEMM, the fp32 planes GEMM over a batch, the swizzled wgmma conv, a program cut into
# compilation units), then kernel probes beside
# eager: the bundled 8192^3 bf16 matmul (wgmma at two tile widths against mma.sync), level 1 task 3
# (planes over a batch against mma.sync), and under ncu level 1 task 87 (1x1 conv: 7.0 ms against eager's 3.5)
# and level 2 task 55 (M = 128 weight-streaming GEMM). Writes $OUT/first_tests.txt and $OUT/first_probe.txt.
# Carry [".whl", ".kb"].
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1
timeout 240 python3 -m pytest -m gpu -q -rA -s tests/test_gpu_expert.py -k "gemm_bf16 or matmul_bf16 or planes_bmm or conv_wgmma or compilation_units" \
  > "$OUT/first_tests.txt" 2>&1
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$OUT/first_tests.txt" | tail -6
probe() {  # task, seconds, extra args...
  local t=$1 s=$2; shift 2
  echo "== $t" >> "$OUT/first_probe.txt"
  timeout "$s" python3 benchmarks/kernel_probe.py "$t" --reps 10 --no-compile "$@" 2>&1 | grep -v Warning \
    | grep '^\[{"name"\|^{"name"\|Error\|error' | cut -c1-900 >> "$OUT/first_probe.txt"
}
w='"wgmma":true,"BM":128,"stages":4'
probe tasks/suite/level1/29_matmul_bf16.py 70 --vary '{}' --vary "{$w,\"BN\":128}" --vary "{$w,\"BN\":256,\"stages\":3}"
probe .kb/level1/3_Batched_matrix_multiplication.py 70 --vary '{}' \
  --vary '{"family":"gemm_tf32","BM":128,"BN":128,"WM":2,"WN":4,"stages":3,"wgmma":false,"planes":false}'
probe .kb/level1/87_conv_pointwise_2D.py 80 --ncu --vary '{}'
probe .kb/level2/55_Matmul_MaxPool_Sum_Scale.py 80 --ncu --vary '{}'
cat "$OUT/first_probe.txt"
