#!/bin/bash
# The eighteenth session's first device call: the GPU first-candidate tests of the staged pool and BatchNorm's
# vectors, then the mem17 bench (1-d/2-d/3-d pools, BatchNorm 33, conv+BN 52) and as much of pool2 as time allows.
# Carry [".whl", ".kbr", "bench_state"]; bench results under $OUT/mem17 and $OUT/pool2 (resumable: copy the .sqlite.xz back).
. benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_expert.py g.log 110 -k "pool_staged or bn_grid"
BENCH_NAME=mem17 BENCH_PATHS=.kbr/mem17 CPS=1 REPS=10 KB_SECONDS=${MEM_S:-170} bash benchmarks/kb_device.sh --total-candidates 1 --no-profile
BENCH_NAME=pool2 BENCH_PATHS=.kbr/pool2 CPS=1 REPS=10 KB_SECONDS=${POOL_S:-230} bash benchmarks/kb_device.sh --total-candidates 1 --no-profile
