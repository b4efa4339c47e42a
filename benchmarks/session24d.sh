#!/bin/bash
# session24c.sh's first probe alone, for the last two minutes of device time (carry [".whl", ".kb3", ".kb"]).
. benchmarks/probe_lib.sh
cd benchmarks
V='{"family": "conv", "algo": "direct", "block": 256, "waves": 8, "ocb": 8, "graph": false}'
P='if (blockIdx.x < 3 && threadIdx.x == 0) printf("smem base %u\n", (unsigned)__cvta_generic_to_shared(smem_raw));'
echo "== RegNet egg_conv_5: the dynamic shared base from the driver; launched again"
timeout 70 python3 nan_probe.py ../.kb3/level3/27_RegNet.py --vary "$V" --again egg_conv_5 \
  --patch "egg_conv_5|unsigned char smem_raw[];|unsigned char smem_raw[]; $P" 2>&1 | grep "smem base\|again\|Error\|patch\|^output" | sort | uniq -c | cut -c1-200
echo "== level 2 task 15 with the refusal lifted"
timeout 60 python3 nan_probe.py ../.kb/level2/15_ConvTranspose3d_BatchNorm_Subtract.py --stats-3d-phased 2>&1 | grep "^output\|Error" | cut -c1-200
