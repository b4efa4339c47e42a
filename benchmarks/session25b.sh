#!/bin/bash
# The second call of the next session (after session25.sh; carry [".whl", ".kb3", ".kb", "bench_state"]; before it
# git rev-parse --short HEAD > bench_state/COMMIT): the bench of what the twenty-fourth session changed: RegNet (27),
# LSTMCn (37, 11 -> 6 recurrences), LSTM (35, its draws replayed), ResNet-18 (9) and level 2 task 15 (runs as a
# program while DECLINE_3D_PHASED stands). .kb3/fix25: copies made here. Then, a call of its own, the level 3 bench resumed
# (5, 42, 45, 46 not yet benched):
#   BENCH_NAME=l3 BENCH_PATHS=.kb3/level3 CPS=1 REPS=10 KB_SECONDS=420 bash benchmarks/kb_device.sh --total-candidates 1 --no-profile
mkdir -p .kb3/fix25 && cp .kb3/level3/{27_RegNet,37_LSTMCn,35_LSTM,9_ResNet18}.py \
  .kb/level2/15_ConvTranspose3d_BatchNorm_Subtract.py .kb3/fix25/
BENCH_NAME=fix25 BENCH_PATHS=.kb3/fix25 CPS=1 REPS=10 KB_SECONDS=480 bash benchmarks/kb_device.sh --total-candidates 1 \
  --no-profile | tail -3
grep -h "^| [0-9]" "$OUT/fix25/results.md" 2>/dev/null | head -6
