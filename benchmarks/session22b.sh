#!/bin/bash
# Twenty-second session (carry [".whl", ".kb3", "bench_state"]; before: git rev-parse --short HEAD > bench_state/COMMIT).
# The fused attention kernel's first GPU run: KernelBench level 3 31, 43, 44, 50 (copies in .kb3/attn) verified and
# timed beside eager and torch.compile; then the bundled whole models (the transformer block's attention too).
. benchmarks/probe_lib.sh
BENCH_NAME=attn BENCH_PATHS=.kb3/attn CPS=1 REPS=10 KB_SECONDS=${ATTN_SECONDS:-330} bash benchmarks/kb_device.sh \
  --total-candidates 1 --no-profile | tail -3
grep -h "^|" "$OUT/attn/results.md" 2>/dev/null | head -12
[ "${S22B_TESTS:-1}" = 1 ] || exit 0
echo "== fused attention as the first candidate"
timeout 100 python3 -m pytest -m gpu -q tests/test_gpu_expert.py -k "first_candidate and attention" 2>&1 | tail -3
echo "== the bundled whole models under the float64 rule"
timeout 150 python3 -m pytest -m gpu -q tests/test_gpu_expert.py -k bundled_whole_model 2>&1 | tail -4
