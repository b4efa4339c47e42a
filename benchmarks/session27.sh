#!/bin/bash
# Twenty-sixth session (device time short: 1619 s after two refused starts): the GPU tests of the twenty-fifth
# session's paths first, then the fix26 bench (resumable: `bash benchmarks/session26.sh bench` goes on with it).
# Carry [".whl", ".kb3", ".kb", "bench_state"], `git rev-parse --short HEAD > bench_state/COMMIT` before.
. benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_expert.py stream27.log 240 -k "linear_stream or lstm_cn or conv_handoff or gru_bidir"
KB_SECONDS=${KB_SECONDS:-300} bash benchmarks/session26.sh bench
