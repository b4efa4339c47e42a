#!/bin/bash
# Issue 19, the conv_stats NaN continued (session23b.sh found: the first launch of RegNet's egg_conv_5/6 NaN, the
# second clean, with a cold L2 too and at one block an SM; racecheck reported one hazard, cut from its output).
# carry [".whl", ".kb3"]. (ptxas pads the static shared to 7168 bytes: the dynamic base is 1024-aligned.)
. benchmarks/probe_lib.sh
cd benchmarks
V='{"family": "conv", "algo": "direct", "block": 256, "waves": 8, "ocb": 8, "graph": false}'
T=../.kb3/level3/27_RegNet.py
echo "== NaN-filled shared memory before both launches of egg_conv_5"
timeout 90 python3 nan_probe.py $T --vary "$V" --twice egg_conv_5 --fill-smem egg_conv_5 2>&1 \
  | grep "^egg_conv_5 \|^egg_conv_5(\|^output\|Error" | cut -c1-150
echo "== racecheck, egg_conv_5 alone"
timeout 170 compute-sanitizer --tool racecheck --racecheck-report hazard --kernel-name kns=egg_conv_5 --print-limit 8 \
  python3 nan_probe.py $T --vary "$V" > "$OUT/race.txt" 2>&1
grep -v "^egg_\|Warning\|^  \|^Traceback\|^torch\|^Search\|^CUDA\|^Compile\|^For debug" "$OUT/race.txt" | head -60 | cut -c1-220
