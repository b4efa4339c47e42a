#!/bin/bash
# Twenty-seventh session (no GPU lent): first convs staged padded to 4 channels, weights staged once a version
# (egg.staged), a Dropout in training mode replayed, and the level 3 networks never benched (7 GoogLeNet, 16
# DenseNet-201, 23/24 EfficientNet-B1/B2, 29 Swin MLP, 30 Swin V2) with 13 and 15 (DenseNet's transitions pooled
# first); copies in the ignored .kb3/new27, fetched as benchmarks/NOTES.md says. Run after
# `bash benchmarks/session27.sh tests` (or with it: `all`); `bash benchmarks/session28.sh bench` goes on with the
# new27 bench alone. Carry [".whl", ".kb3", ".kb", "bench_state"], `git rev-parse --short HEAD > bench_state/COMMIT` before.
. benchmarks/probe_lib.sh
if [ "${1:-}" != bench ]; then
[ "${1:-}" = all ] && bash benchmarks/session27.sh tests
gpu_tests tests/test_gpu_expert.py pad28.log 240 -k "conv_pad or weights_staged or graph_verifies or dropout_train or cosine_attention"
# the padded first design against the in-place gather it replaces (SqueezeNet's first conv is its tuned stage; level 1
# task 50 is AlexNet's first conv alone)
OLD='{"cpad": false, "layout": "nchw", "wgmma": false, "swz": false}'
probe pad28.txt .kb3/level3/18_SqueezeNet.py 150 --first --kernels --vary '{}' --vary "$OLD"
probe pad28.txt .kb/level1/50_conv_standard_2D__square_input__square_kernel.py 90 --first --kernels --vary '{}' --vary "$OLD"
cut -c1-400 "$OUT/pad28.txt"
fi
BENCH_NAME=new27 BENCH_PATHS=.kb3/new27 CPS=1 REPS=10 KB_SECONDS=${KB_SECONDS:-300} \
  bash benchmarks/kb_device.sh --total-candidates 1 --no-profile | tail -3
grep -h "^| [0-9]" "$OUT/new27/results.md" 2>/dev/null | cut -c1-200 | head -8
