#!/bin/bash
# Left for the next session (written in the twenty-third; carry [".whl", ".kb3", "bench_state"]; before the call:
# git rev-parse --short HEAD > bench_state/COMMIT). Issue 19:
# 1) ResNet-18 failed the float64 rule at 810bd08 with every kernel deterministic; the only kernel whose meaning changed
#    in its program was the classifier's (a 16x64 mma.sync GEMM split twice for 2 rows, where it was a 128x128 wgmma on
#    planes), which passes the CPU emulator. Since then a few rows take narrow tiles only where N <= SMALL_M_MAX_N (512):
#    the head is back on the wgmma. The output's distance from eager as it is now, and with the narrow head again:
# 2) the narrow-tile bench again (9 and 11 back on their 128-row tiles, 34 on narrow ones) and the attention ring's
#    new default in 50 (bench_state/smallm.sqlite.xz holds the last run: another BENCH_NAME here).
. benchmarks/probe_lib.sh
cd benchmarks
V='{"family": "conv", "algo": "direct", "block": 256, "waves": 8, "ocb": 8, "graph": false}'
for S in "" "--set agents.expert.agent.SMALL_M_MAX_N=4096"; do
  echo "== ResNet-18 $S"
  timeout 90 python3 nan_probe.py ../.kb3/level3/9_ResNet18.py --vary "$V" $S 2>&1 | grep "^output\|Error" | cut -c1-200
done
# 3) RegNet's racy conv_stats conv: NaN it computes, or elements it leaves unwritten (--again's second launch goes into
#    a sentinel)? Then the knobs NOTES (twenty-third session) lists, one at a time, with --again egg_conv_5.
# With one warpgroup a block (BM 64: a race between the two would go) and without the swizzle (an address fault would
# move); `--stage` merges knobs into the program's conv_stats stages (2 stages or 64-wide tiles plan nothing there).
for S in "" 'conv_stats={"BM": 64}' 'conv_stats={"swz": false}'; do
  echo "== RegNet egg_conv_5 $S"
  timeout 90 python3 nan_probe.py ../.kb3/level3/27_RegNet.py --vary "$V" --again egg_conv_5 ${S:+--stage "$S"} 2>&1 \
    | grep "again\|Error" | cut -c1-200
done
cd ..
BENCH_NAME=smallm2 BENCH_PATHS=.kb3/smallm CPS=1 REPS=10 KB_SECONDS=200 bash benchmarks/kb_device.sh --total-candidates 1 \
  --no-profile | tail -3
grep -h "^| [0-9]" "$OUT/smallm2/results.md" 2>/dev/null | head -8
# Then, a call of its own: the level 3 bench resumed (bench_state/l3.sqlite.xz; 13 fetched tasks not benched yet: NOTES
# "twenty-third session"), and the H200 norms cluster (`session21b.sh`, needs_h200):
#   BENCH_NAME=l3 BENCH_PATHS=.kb3/level3 CPS=1 REPS=10 KB_SECONDS=420 bash benchmarks/kb_device.sh --total-candidates 1 --no-profile
