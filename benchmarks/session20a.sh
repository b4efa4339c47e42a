#!/bin/bash
# The twentieth session's first call (carry [".whl", ".kb", ".kbr", "bench_state"]): the NaN trial's GPU tests, then
# session20b.sh's probes (CrossEntropy's kernels, the large-K GEMM), KernelBench 99 with its two distances in one pass
# (1.435 ms at 33f2d58 in nan19, H100; torch.compile 1.124), and the dim reductions with tcols' split first (dimred20).
. benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_verifier.py verifier.txt 120 -k "nan or honest"
gpu_tests tests/test_nan_semantics.py nan.txt 100
probe s.txt .kb/level1/99_TripletMarginLoss.py 60 --first --reps 10 --vary '{}'
cut -c1-300 "$OUT/s.txt"
bash benchmarks/session20b.sh
BENCH_NAME=dimred20 BENCH_PATHS=.kbr/dimred CPS=1 REPS=10 KB_SECONDS=100 bash benchmarks/kb_device.sh --total-candidates 1 \
  --no-profile | tail -2
