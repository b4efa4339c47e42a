#!/bin/bash
# Left for the next session by the twenty-fourth (its device time ran out on refused starts before any of this ran).
# Carry [".whl", ".kb3", ".kb", "bench_state"]; two calls (each under 10 minutes): this one, then session25b.sh.
# 1) The swizzle fix (bf73c36: a swizzled conv ring aligns its dynamic shared memory itself): the base the driver gives
#    RegNet's conv_stats conv (printed by the kernel), the conv launched twice more (was a race on every launch), and
#    level 2 task 15 with its 3-d phased conv_stats refusal lifted (its NaN, never explained, fits the same cause:
#    rowinfo's 5 ints a row make its static shared no multiple of 1024).
. benchmarks/probe_lib.sh
bash benchmarks/session24d.sh
# 2) The GPU tests the fix, the LSTM merge and the replayed draws touch (many_waves: RegNet's first stage at its size).
gpu_tests tests/test_gpu_conv.py conv25.log 200 -k "many_waves or batch_statistics or reductions_in_the_conv"
gpu_tests tests/test_gpu_expert.py rnn25.log 100 -k "first_candidate and lstm"  # lstm, lstm_cn, lstm_drawn
gpu_tests tests/test_gpu_verifier.py verifier25.log 150  # the worker's trials now record the reference's draws
