#!/bin/bash
# Left by the twenty-fifth session (its device was refused, then not lent: nothing since 127783d has run on a GPU).
# Three calls, each with carry [".whl", ".kb3", ".kb", "bench_state"] and `git rev-parse --short HEAD > bench_state/COMMIT`
# before it:
#   1) bash benchmarks/session25.sh   (the swizzle fix's probes on RegNet and level 2 task 15; conv, LSTM, verifier GPU tests)
#   2) bash benchmarks/session26.sh   (this: the streaming GEMM's GPU test and probe, then the bench started)
#   3) bash benchmarks/session26.sh bench   (the bench resumed; again until results.md lists all 11)
# .kb3 (ignored; rebuild with read_file from sfc-gh-goliaro/KernelBench, KernelBench/level3/NAME.py): fix26/ holds level 3
# 27 RegNet, 37 LSTMCn, 35 LSTM, 9 ResNet18, 11 VGG16, 12 VGG19, 5 AlexNet, 42 GRUBidirectionalHidden, 45 UNetSoftmax,
# 46 NetVladWithGhostClusters (its file does not parse upstream: expect a clear "syntax error") and level 2 task 15;
# probe26/vgg_fc1.py is VGG16's first classifier layer alone (Linear(25088, 4096) + relu at batch 10).
. benchmarks/probe_lib.sh
if [ "${1:-}" != bench ]; then
  gpu_tests tests/test_gpu_expert.py stream26.log 150 -k "linear_stream or lstm_cn"
  # the layer that took 0.483 ms as 3xTF32 128x128 tiles split 4 ways (its weights' copy floor: 0.098 ms)
  probe head26.txt .kb3/probe26/vgg_fc1.py 150 --first --vary '{}' --vary '{"splitk": 8}' --vary '{"splitk": 32}' \
    --vary '{"stream": false, "BM": 128, "BN": 128, "WM": 2, "WN": 4, "stages": 3, "splitk": 4}' \
    --vary '{"stream": false, "BM": 16, "BN": 64, "WM": 1, "WN": 2, "stages": 3, "splitk": 12}'
  cut -c1-400 "$OUT/head26.txt"
fi
BENCH_NAME=fix26 BENCH_PATHS=.kb3/fix26 CPS=1 REPS=10 KB_SECONDS=${KB_SECONDS:-$([ "${1:-}" = bench ] && echo 560 || echo 250)} \
  bash benchmarks/kb_device.sh --total-candidates 1 --no-profile | tail -3
grep -h "^| [0-9]" "$OUT/fix26/results.md" 2>/dev/null | cut -c1-200 | head -12
