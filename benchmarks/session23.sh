#!/bin/bash
# Left for the next session (written in the twenty-second; carry [".whl", ".kb3", "bench_state"]; before the call:
# git rev-parse --short HEAD > bench_state/COMMIT). .kb3/smallm holds copies of level 3 9, 11, 34 (the tasks whose
# programs have matmuls of at most 32 rows: NOTES "twenty-second session"); .kb3/level3 as NOTES "twenty-first" says.
# 1) the narrow-tile matmuls measured in their programs (34: 34.6 ms before, eager 20.9; 11: 3.60, eager 3.37);
# 2) the attention ring on and off under ncu. Then separate calls: `S22_BENCH=0 S22_BUNDLED=0 bash benchmarks/session22.sh`
# (the RegNet probes, the spin-gated kernel times test), `timeout 560 python3 -m pytest -m gpu -q tests/test_gpu_expert.py
# -k bundled_whole_model` after `. benchmarks/probe_lib.sh` (cut at 150 s in the twenty-second session), the rest of
# the level 3 bench (session22.sh's last line).
BENCH_NAME=smallm BENCH_PATHS=.kb3/smallm CPS=1 REPS=10 KB_SECONDS=${SMALLM_SECONDS:-200} bash benchmarks/kb_device.sh \
  --total-candidates 1 --no-profile | tail -3
grep -h "^| [0-9]" "$OUT/smallm/results.md" 2>/dev/null | head -8
# the attention kernel's ring on and off in 43 (heads of 96: off by default, 2 blocks an SM) and 50 (heads of 64: on),
# with each variant's kernels under Nsight Compute (43 and 50 reach 20-25% of the TF32 rate where 31 reaches 58%)
. benchmarks/probe_lib.sh
probe att.txt .kb3/level3/43_MinGPTCausalAttention.py 120 --vary '{}' --vary '{"r4.ring": true}' --ncu
probe att.txt .kb3/level3/50_ReLUSelfAttention.py 120 --vary '{}' --vary '{"r4.ring": false}' --ncu
cut -c1-400 "$OUT/att.txt"
