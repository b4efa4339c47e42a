#!/bin/bash
# Twenty-sixth session (device time short after refused starts): the GPU tests of the twenty-fifth and twenty-sixth
# sessions' paths, the recurrence's two product layouts on level 3 task 35, then the rnn27 bench (resumable: `KB_SECONDS=560 bash
# benchmarks/session27.sh bench` goes on with it; then `bash benchmarks/session26.sh bench` for the rest). Carry [".whl", ".kb3", ".kb", "bench_state"],
# `git rev-parse --short HEAD > bench_state/COMMIT` before.
. benchmarks/probe_lib.sh
if [ "${1:-}" = short ]; then  # the least device time: this session's GPU cases alone
  gpu_tests tests/test_gpu_expert.py short27.log 230 -k "gru_bidir or fire_cat or lstm_cn"; exit 0
fi
if [ "${1:-}" != bench ]; then
gpu_tests tests/test_gpu_expert.py stream27.log 240 -k "linear_stream or lstm or conv_handoff or gru_bidir or fire_cat"
# K chunks a warp (the new first design) against a gate row's lanes on strided chunks (before d82cc98)
probe rnn27.txt .kb3/fix26/35_LSTM.py 100 --first --vary '{}' --vary '{"@recurrent": {"kchunk": false, "block": 512}}'
cut -c1-400 "$OUT/rnn27.txt"
fi
[ "${1:-}" = tests ] && exit 0  # (a call with little device time left: the GPU tests and the probe only)
# .kb3/rnn27: fix26's tasks this session and the last changed most (38 41 35 37 42, VGG16, ResNet-18, RegNet) first
BENCH_NAME=rnn27 BENCH_PATHS=.kb3/rnn27 CPS=1 REPS=10 KB_SECONDS=${KB_SECONDS:-200} \
  bash benchmarks/kb_device.sh --total-candidates 1 --no-profile | tail -3
grep -h "^| [0-9]" "$OUT/rnn27/results.md" 2>/dev/null | cut -c1-200 | head -16
