#!/bin/bash
# Issue 19: which kernels of ResNet18 and RegNet land elsewhere when launched again on the same inputs (a race; a
# deterministic kernel lands on its own launch exactly), then racecheck's hazard in RegNet's egg_conv_5 in full.
# carry [".whl", ".kb3"].
. benchmarks/probe_lib.sh
cd benchmarks
V='{"family": "conv", "algo": "direct", "block": 256, "waves": 8, "ocb": 8, "graph": false}'
for T in ../.kb3/level3/9_ResNet18.py ../.kb3/level3/27_RegNet.py; do
  echo "== $T: each kernel twice more"
  timeout 80 python3 nan_probe.py $T --vary "$V" --again egg_ 2>&1 | grep "again\|^output\|Error" | grep -v "to its launch 0 (0 NaN apart); 0 NaN" \
    | cut -c1-150
done
echo "== racecheck, egg_conv_5 alone"
timeout 60 compute-sanitizer --tool racecheck --racecheck-report hazard --kernel-name kns=egg_conv_5 --print-limit 4 \
  python3 nan_probe.py ../.kb3/level3/27_RegNet.py --vary "$V" > "$OUT/race.txt" 2>&1
grep -v "^egg_\|Warning\|^  \|^Traceback\|^torch\|^Search\|^CUDA\|^Compile\|^For debug" "$OUT/race.txt" | head -40 | cut -c1-200
