#!/bin/bash
# Left for the next session by the twenty-fourth (its device time ran out on refused starts before any of this ran).
# Carry [".whl", ".kb3", ".kb", "bench_state"]; before the call: git rev-parse --short HEAD > bench_state/COMMIT.
# 1) The swizzle fix (bf73c36: a swizzled conv ring aligns its dynamic shared memory itself): the base the driver gives
#    RegNet's conv_stats conv (printed by the kernel), the conv launched twice more (was a race on every launch), and
#    level 2 task 15 with its 3-d phased conv_stats refusal lifted (its NaN, never explained, fits the same cause:
#    rowinfo's 5 ints a row make its static shared no multiple of 1024).
bash benchmarks/session24d.sh
# 2) The GPU tests the fix and the LSTM change touch (the new many_waves test is RegNet's first stage at its size).
. benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_conv.py conv25.log 240 -k "many_waves or batch_statistics or reductions_in_the_conv or awkward"
gpu_tests tests/test_gpu_expert.py rnn25.log 120 -k "first_candidate and lstm"  # lstm, lstm_cn, lstm_drawn
gpu_tests tests/test_gpu_verifier.py verifier25.log 300  # the worker's trials now record the reference's draws
# 3) The bench of what changed: RegNet (27), LSTMCn (37, 11 -> 6 recurrences), LSTM (35, its draws replayed),
#    ResNet-18 (9), level 2 task 15
#    (.kb3/fix25 holds copies; task 15 runs as conv_stats only with DECLINE_3D_PHASED lifted: see NOTES).
BENCH_NAME=fix25 BENCH_PATHS=.kb3/fix25 CPS=1 REPS=10 KB_SECONDS=300 bash benchmarks/kb_device.sh --total-candidates 1 \
  --no-profile | tail -3
grep -h "^| [0-9]" "$OUT/fix25/results.md" 2>/dev/null | head -6
# Then (a call of its own) the level 3 bench resumed: 5, 42, 45, 46 not yet benched:
#   BENCH_NAME=l3 BENCH_PATHS=.kb3/level3 CPS=1 REPS=10 KB_SECONDS=420 bash benchmarks/kb_device.sh --total-candidates 1 --no-profile
