#!/bin/bash
# The 3xTF32 planes GEMM (issue 16) on the lent H200, in one device call of about 200 s: the kernel probe
# at 4096^3 (mma.sync default beside three planes shapes, eager timed, torch.compile skipped), then the
# wgmma conv beside mma.sync on two convs, then the GPU tests of the planes and the wgmma conv. Writes $OUT/planes_probe.txt and $OUT/gpu_tests.txt.
# Carry [".whl", ".kb"] (see benchmarks/kb_device.sh for the wheelhouse and .kb).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1
planes='"wgmma":true,"planes":true,"BM":128'
timeout 150 python3 benchmarks/kernel_probe.py .kb/level1/1_Square_matrix_multiplication_.py --reps 10 --no-compile \
  --vary '{}' \
  --vary "{$planes,\"BN\":128,\"BK\":32,\"stages\":3,\"fold\":4,\"swz\":true}" \
  --vary "{$planes,\"BN\":128,\"BK\":32,\"stages\":3,\"fold\":4}" 2>&1 | grep -v Warning > "$OUT/planes_probe.txt"
grep '^{"name"\|^\[' "$OUT/planes_probe.txt" | cut -c1-300
wg='"layout":"nhwc","split":1,"wgmma":true,"BM":128,"stages":4'
for t in level2/1_Conv2D_ReLU_BiasAdd; do
  timeout 100 python3 benchmarks/kernel_probe.py .kb/$t.py --reps 10 --no-compile --vary '{}' \
    --vary "{$wg,\"BN\":128}" --vary "{$wg,\"BN\":128,\"swz\":true}" 2>&1 | grep -v Warning >> "$OUT/conv_probe.txt"
done
grep '^{"name"\|^\[' "$OUT/conv_probe.txt" | cut -c1-300
timeout 90 python3 -m pytest -m gpu -q -rA tests/test_gpu_conv.py -k "planes or awkward" > "$OUT/gpu_tests.txt" 2>&1
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.txt" | tail -20
