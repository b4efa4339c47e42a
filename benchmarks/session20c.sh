#!/bin/bash
# The twentieth session's check of its row changes (carry [".whl", ".kb"]): KernelBench 95 (a warp a row, the mean's
# block of 1024 unrolled) and 99 (two distances in one pass, three inputs 16 bytes a read), first designs, kernels.
. benchmarks/probe_lib.sh
for t in 95_CrossEntropyLoss 99_TripletMarginLoss; do
  echo "== $t" >> "$OUT/c.txt"
  timeout 80 python3 benchmarks/kernel_probe.py .kb/level1/$t.py --reps 20 --kernels --no-compile --first --vary '{}' 2>&1 \
    | grep '^\[{"name"\|^{"name"\|Error\|error' | cut -c1-900 >> "$OUT/c.txt"
done
cat "$OUT/c.txt"
