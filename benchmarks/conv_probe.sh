#!/bin/bash
# Level-1 convolutions (issue 17: 0.5-0.8x eager) on the lent H200, one device call of about 400 s: each task's
# default conv beside the knobs that change its shared-memory traffic (64x64 warp tiles, ldmatrix) and how
# many blocks an SM holds (a 2-stage ring, 64-pixel tiles), and the swizzled wgmma; eager timed beside them, torch.compile skipped; the
# first task with --ncu (its kernels' durations: staging apart from the GEMM). Writes $OUT/conv_probe.txt.
# Carry [".whl", ".kb"].
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1
ncu=--ncu
for t in ${CONV_TASKS:-level1/63_conv_standard_2D__square_input__square_kernel level2/1_Conv2D_ReLU_BiasAdd level1/87_conv_pointwise_2D level1/54_conv_standard_3D__square_input__square_kernel}; do
  echo "== $t" >> "$OUT/conv_probe.txt"
  timeout ${PROBE_SECONDS:-100} python3 benchmarks/kernel_probe.py .kb/$t.py --reps 10 --no-compile $ncu \
    --vary '{}' --vary '{"WM":2,"WN":2}' --vary '{"ldm":true}' --vary '{"stages":2}' --vary '{"BM":64,"WM":2,"WN":4}' \
    --vary '{"wgmma":true,"BM":128,"stages":4,"swz":true}' 2>&1 | grep -v Warning | grep '^\[{"name"\|^{"name"\|Error\|error' \
    | cut -c1-600 >> "$OUT/conv_probe.txt"
  ncu=
done
cat "$OUT/conv_probe.txt"
