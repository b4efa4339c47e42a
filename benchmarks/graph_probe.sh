#!/bin/bash
# Programs as one CUDA graph (issue 19) on the lent H200, one device call of about 500 s: the GPU test of a
# graphed program beside its direct launches, then the kernel probe of level-3 whole networks with the
# graph on and off beside eager (torch.compile skipped: inductor's warm-up of a whole network takes minutes).
# Writes $OUT/gpu_graph_tests.txt and $OUT/graph_probe.txt. Carry [".whl", ".kb3"] (.kb3/level3: see NOTES.md).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit 1
timeout 240 python3 -m pytest -m gpu -q -rA -s tests/test_gpu_expert.py -k "cuda_graph or bn_segmented or bn_grid or grid_loss or conv_splitk" > "$OUT/gpu_graph_tests.txt" 2>&1
grep -E "^(PASSED|FAILED|ERROR)|passed|failed|graph .* ms" "$OUT/gpu_graph_tests.txt" | tail -8
for t in ${GRAPH_TASKS:-4_LeNet5 1_MLP 9_ResNet18 44_MiniGPTBlock 20_MobileNetV2 34_VanillaRNNHidden}; do
  echo "== $t" >> "$OUT/graph_probe.txt"
  timeout ${PROBE_SECONDS:-100} python3 benchmarks/kernel_probe.py .kb3/level3/$t.py --reps 20 --no-compile \
    --vary '{"graph":true}' --vary '{"graph":false}' 2>&1 | grep -v Warning | grep '^\[{"name"\|^{"name"\|Error\|error' \
    | cut -c1-400 >> "$OUT/graph_probe.txt"
done
cat "$OUT/graph_probe.txt"
