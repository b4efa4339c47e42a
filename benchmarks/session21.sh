#!/bin/bash
# Left for the next session (written in the twentieth; carry [".whl", ".kb", ".kbr", "bench_state"]; before the call:
# git rev-parse --short HEAD > bench_state/COMMIT). nanconv2's remainder (34 level 2 convs; resumes from
# bench_state/nanconv2.sqlite.xz), then the level 1 row/pointwise/grid/scan tasks after ca2443b's row defaults (nan19's
# folder: compare with benchmarks/kernelbench_2026-12-07_h100_33f2d58_nan19.json). Copy each $OUT/NAME/NAME.sqlite.xz
# into bench_state/ after the call; a second call resumes what the first left.
BENCH_NAME=nanconv2 BENCH_PATHS=.kbr/nanconv2 CPS=1 REPS=10 KB_SECONDS=300 bash benchmarks/kb_device.sh --total-candidates 1 \
  --no-profile | tail -2
BENCH_NAME=nan21 BENCH_PATHS=.kbr/nan19 CPS=1 REPS=10 KB_SECONDS=240 bash benchmarks/kb_device.sh --total-candidates 1 \
  --no-profile | tail -2
# Level 1 task 4 after 6774bbf (the vector read at r, 16 bytes a read; 3.089 ms at bcf3248, eager 2.948, compile 2.819)
. benchmarks/probe_lib.sh
probe s.txt .kb/level1/4_Matrix_vector_multiplication_.py 60 --first --reps 10 --vary '{}'
cut -c1-300 "$OUT/s.txt"
