#!/bin/bash
# Why the 3xTF32 planes GEMM (wgmma) loses to mma.sync at 4096^3 (4.31 ms against 2.69, 2026-12-05): both
# kernels under Nsight Compute through kernel_probe --ncu (stall reasons, pipes, shared memory, L2), then
# the GPU tests left from the last call. Writes $OUT/planes_ncu.txt and $OUT/gpu_tests.txt.
# Carry [".whl", ".kb"] (see benchmarks/kb_device.sh for the wheelhouse and .kb).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1
planes='"wgmma":true,"planes":true,"BM":128'
timeout 200 python3 benchmarks/kernel_probe.py .kb/level1/1_Square_matrix_multiplication_.py --reps 10 --no-compile --ncu \
  --dump /tmp/probe --vary '{}' --vary "{$planes,\"BN\":128,\"BK\":32,\"stages\":3,\"fold\":4}" 2>&1 | grep -v Warning > "$OUT/planes_ncu.txt"
grep '^{"name"' "$OUT/planes_ncu.txt" | cut -c1-3000
# the planes GEMM under the full set, with the source counters' hottest SASS (where its warps stall)
ncu=$(python3 -c "from runtime.profiler import ncu_path; print(ncu_path())")
timeout 150 "$ncu" --clock-control none --set full -k regex:^egg_gemm$ --launch-count 1 --print-details all \
  python3 -m runtime.profiler .kb/level1/1_Square_matrix_multiplication_.py /tmp/probe/probe-1.json sm_90a > "$OUT/planes_ncu_full.txt" 2>&1
grep -iE "bank|Throughput|Stall|Issued|Pipe|Eligible|Active Warps" "$OUT/planes_ncu_full.txt" | head -60
# its SASS (this machine has no cuobjdump): what the k-loop issues between the MMAs
python3 -c "
import json; c = json.load(open('/tmp/probe/probe-1.json')); open('/tmp/probe/planes.cu', 'w').write(c['cuda_source'])" \
  && nvcc -arch=sm_90a -cubin -lineinfo -o /tmp/probe/planes.cubin /tmp/probe/planes.cu \
  && cuobjdump -sass /tmp/probe/planes.cubin > "$OUT/planes.sass" 2>&1; wc -l "$OUT/planes.sass"
timeout 170 python3 -m pytest -m gpu -q -rA tests/test_gpu_expert.py -k "first_candidate and (lstm or odd or splitk)" \
  > "$OUT/gpu_tests.txt" 2>&1
grep -E "^(PASSED|FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.txt" | tail -20
