#!/bin/bash
# The dim reductions (KernelBench 47-53) with 4 strided rows a thread (mapping tcols, the first design at 3c1fb23)
# beside a thread a row (the first design before), then DRAM bytes read by each (ncu). Carry [".whl", ".kb"].
. benchmarks/probe_lib.sh
TH='{"mapping": "thread", "block": 256}'
probe r.txt .kb/level1/47_Sum_reduction_over_a_dimension.py 60 --first --reps 10 --vary '{}' --vary "$TH" --vary '{"block": 512}' --vary '{"block": 128}'
for t in 48_Mean 49_Max 51_Argmax 52_Argmin 53_Min; do
  probe r.txt $(ls .kb/level1/${t}_*.py) 45 --first --reps 10 --vary '{}' --vary "$TH"
done
cut -c1-260 "$OUT/r.txt"
M=gpu__time_duration.sum,dram__bytes_read.sum,lts__t_sector_hit_rate.pct
timeout 100 ncu --kernel-name regex:"egg_rows" --launch-count 2 --metrics $M --csv python3 benchmarks/kernel_probe.py \
  .kb/level1/47_Sum_reduction_over_a_dimension.py --first --reps 1 --no-compile --vary '{}' --vary "$TH" > "$OUT/ncu.csv" 2>&1
grep '"egg_rows"' "$OUT/ncu.csv" | cut -d, -f1,13-15
# the 1-d pools with 8 outputs a thread (8 16-byte loads for 8 outputs: 41's dilated window 7 for 4), 45 (stride = window
# 11: no overlap) with 4 a thread read 16 bytes at a time (11 loads for 4 outputs, none wasted)
probe p.txt .kb/level1/41_Max_Pooling_1D.py 45 --first --reps 10 --vary '{}' --vary '{"vec": 8}'
probe p.txt .kb/level1/42_Max_Pooling_2D.py 45 --first --reps 10 --vary '{"rows": 8}' --vary '{"rows": 8, "block": 128}'
probe p.txt .kb/level1/44_Average_Pooling_1D.py 45 --first --reps 10 --vary '{}' --vary '{"vec": 8}'
probe p.txt .kb/level1/45_Average_Pooling_2D.py 90 --first --reps 10 --vary '{}' --vary '{"vec": 4, "ostage": true}' --vary '{"vec": 4}'
cut -c1-200 "$OUT/p.txt"
