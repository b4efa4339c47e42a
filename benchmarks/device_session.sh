#!/bin/bash
# One device call that does what belongs together: the verifier's GPU tests (capped), then as much of
# the KernelBench bench as the call has left (resumable: benchmarks/kb_device.sh).
# Carry [".whl", ".kb", "bench_state"]. Usage: [GPU_TESTS="tests/test_gpu_conv.py ..."] [BENCH_NAME=... BENCH_PATHS=...
#   CPS=... REPS=... BENCH_ARGS="--no-compile ..."] benchmarks/device_session.sh [TEST_SECONDS] [BENCH_SECONDS] [pytest -k expr]
set -uo pipefail
tests_s=${1:-240}; bench_s=${2:-300}; sel=${3:-}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.used,clocks.sm --format=csv,noheader
if [ "$tests_s" -gt 0 ]; then
  # shellcheck disable=SC2086
  timeout "$tests_s" python3 -m pytest -m gpu -v -p no:cacheprovider -rA ${GPU_TESTS:-tests/test_gpu_verifier.py tests/test_gpu_runtime.py} \
    ${sel:+-k "$sel"} > "$OUT/gpu_tests.log" 2>&1
  grep -E "^(PASSED|FAILED|ERROR)|passed|failed|peak|copy:" "$OUT/gpu_tests.log" | tail -60
fi
if [ "$bench_s" -gt 0 ]; then
  # shellcheck disable=SC2086
  KB_SECONDS=$bench_s bash benchmarks/kb_device.sh ${BENCH_ARGS:-}
fi
