#!/bin/bash
# Twenty-sixth session (device time short after refused starts): the GPU tests of the twenty-fifth and twenty-sixth
# sessions' paths, the recurrence's two product layouts on level 3 task 35, then the fix26 bench (resumable:
# `bash benchmarks/session26.sh bench` goes on with it). Carry [".whl", ".kb3", ".kb", "bench_state"],
# `git rev-parse --short HEAD > bench_state/COMMIT` before.
. benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_expert.py stream27.log 240 -k "linear_stream or lstm or conv_handoff or gru_bidir"
# K chunks a warp (the new first design) against a gate row's lanes on strided chunks (before d82cc98)
probe rnn27.txt .kb3/fix26/35_LSTM.py 100 --first --vary '{}' --vary '{"@recurrent": {"kchunk": false, "block": 512}}'
cut -c1-400 "$OUT/rnn27.txt"
KB_SECONDS=${KB_SECONDS:-240} bash benchmarks/session26.sh bench
