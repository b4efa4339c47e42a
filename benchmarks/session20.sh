#!/bin/bash
# Left for the next session (written in the nineteenth; carry [".whl", ".kb", ".kbr", "bench_state"]; before the call:
# git rev-parse --short HEAD > bench_state/COMMIT). The NaN trial's GPU tests after its dependence runs lost cuDNN and
# TF32, the dim reductions with tcols' split first (c217552), then the NaN trial over the tasks this session's benches
# left out: level 1 GEMMs 4 5 11 12 14 15 and 88, the level 2 tasks without a conv (`nanrest`), then in later calls the
# convs (`nanconv1`: level 1 50, 54-87; `nanconv2`: 63 level 2 tasks), resumable (copy each $OUT/NAME/NAME.sqlite.xz into
# bench_state/ after the call). Folders: python benchmarks/kbr.py nanrest level1:4,5,11,12,14,15,88 level2:... (the
# nineteenth session's NOTES list them).
. benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_verifier.py verifier.txt 120 -k "nan or honest"
gpu_tests tests/test_nan_semantics.py nan.txt 120
# egg_max/egg_min as max.NaN/min.NaN (after 33f2d58): the max pools (41 2.398 ms, 42 1.701, 43 1.722 in the pool19 bench,
# H100) and a max reduction (49 3.166), first designs; 42 was estimated half ALU-bound with the 4-instruction max
for t in 41_Max_Pooling_1D 42_Max_Pooling_2D 43_Max_Pooling_3D 49_Max_reduction_over_a_dimension; do
  probe s.txt .kb/level1/$t.py 45 --first --reps 10 --vary '{}'
done
cut -c1-200 "$OUT/s.txt"
BENCH_NAME=dimred20 BENCH_PATHS=.kbr/dimred CPS=1 REPS=10 KB_SECONDS=100 bash benchmarks/kb_device.sh --total-candidates 1 \
  --no-profile | tail -2
BENCH_NAME=nanrest BENCH_PATHS=.kbr/nanrest CPS=1 REPS=10 KB_SECONDS=300 bash benchmarks/kb_device.sh --total-candidates 1 \
  --no-profile | tail -2
