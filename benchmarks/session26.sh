#!/bin/bash
# Left by the twenty-fifth session (its device was refused, then not lent: nothing since 127783d has run on a GPU).
# Calls, each with carry [".whl", ".kb3", ".kb", "bench_state"] and `git rev-parse --short HEAD > bench_state/COMMIT`
# before it (.whl holds einops too: level 3 48/49 import it):
#   1) bash benchmarks/session25.sh        (the swizzle fix's probes on RegNet and level 2 task 15; conv, LSTM, verifier GPU tests)
#   2) bash benchmarks/session26.sh        (this: the GPU tests of the streaming GEMM, the conv hand-off and LSTMCn, and probes)
#   3) bash benchmarks/session26.sh bench  (the bench; again until results.md lists all 15 of .kb3/fix26; about 20 minutes in all)
# .kb3 (ignored; rebuild with read_file from sfc-gh-goliaro/KernelBench, KernelBench/level3/NAME.py): fix26/ holds level 3
# 27 RegNet, 37 LSTMCn, 35 LSTM, 9 ResNet18, 11 VGG16, 12 VGG19, 5 AlexNet, 42 GRUBidirectionalHidden, 45 UNetSoftmax,
# 46/47 NetVlad (their files do not parse upstream: expect a clear "syntax error"), 32 ConvolutionalVisionTransformer,
# 48/49 Mamba2 (einsums, newly planned) and level 2 task 15; probe26/vgg_fc1.py is VGG16's first classifier layer alone
# (Linear(25088, 4096) + relu at batch 10). From the twenty-sixth session fix26/ holds the rest: 12 VGG19, level 2 15,
# 32, 45, 46, 47, 48, 49, 5 AlexNet, 18 SqueezeNet and 6 GoogleNetInceptionModule (convs into their concatenation);
# 9 11 27 35 37 38 41 42 moved to rnn27/ (session27.sh benches them first).
. benchmarks/probe_lib.sh
if [ "${1:-}" != bench ]; then
  gpu_tests tests/test_gpu_expert.py stream26.log 200 -k "linear_stream or lstm_cn or conv_handoff"
  # the layer that took 0.483 ms as 3xTF32 128x128 tiles split 4 ways (its weights' copy floor: 0.098 ms)
  probe head26.txt .kb3/probe26/vgg_fc1.py 120 --first --vary '{}' --vary '{"splitk": 8}' --vary '{"splitk": 32}' \
    --vary '{"stream": false, "BM": 128, "BN": 128, "WM": 2, "WN": 4, "stages": 3, "splitk": 4}' \
    --vary '{"stream": false, "BM": 16, "BN": 64, "WM": 1, "WN": 2, "stages": 3, "splitk": 12}'
  # VGG16 whole, its conv -> conv hand-offs on and off (6 staging passes of 12 dropped)
  probe vgg26.txt .kb3/fix26/11_VGG16.py 200 --first --kernels --vary '{}' --vary '{"handoff": false}'
  cut -c1-600 "$OUT/head26.txt" "$OUT/vgg26.txt"
  exit 0
fi
BENCH_NAME=fix26 BENCH_PATHS=.kb3/fix26 CPS=1 REPS=10 KB_SECONDS=${KB_SECONDS:-560} \
  bash benchmarks/kb_device.sh --total-candidates 1 --no-profile | tail -3
grep -h "^| [0-9]" "$OUT/fix26/results.md" 2>/dev/null | cut -c1-200 | head -16
