#!/bin/bash
# session24b.sh cut to what little device time is left (carry [".whl", ".kb3"]), after the fix (gemm_tf32.smem_base:
# a swizzled conv ring moves itself to the next 1024-byte boundary): the dynamic shared base RegNet's conv_stats conv
# gets from the driver, the conv launched again (was a race), ResNet-18's narrow head in a program of one compilation
# unit, and the GPU test of conv_stats at RegNet's size.
. benchmarks/probe_lib.sh
cd benchmarks
V='{"family": "conv", "algo": "direct", "block": 256, "waves": 8, "ocb": 8, "graph": false}'
R=../.kb3/level3/27_RegNet.py
P='if (blockIdx.x < 3 && threadIdx.x == 0) printf("smem base %u\n", (unsigned)__cvta_generic_to_shared(smem_raw));'
echo "== RegNet egg_conv_5: the dynamic shared base from the driver; launched again"
timeout 80 python3 nan_probe.py $R --vary "$V" --again egg_conv_5 \
  --patch "egg_conv_5|unsigned char smem_raw[];|unsigned char smem_raw[]; $P" 2>&1 | grep "smem base\|again\|Error\|patch\|^output" | sort | uniq -c | cut -c1-200
echo "== ResNet-18's narrow head, the program one compilation unit"
timeout 80 python3 nan_probe.py ../.kb3/level3/9_ResNet18.py --vary "$V" --set agents.expert.agent.SMALL_M_MAX_N=4096 \
  --set agents.expert.agent.UNIT_CHARS=1000000000 2>&1 | grep "^output\|Error" | cut -c1-240
echo "== level 2 task 15 (3-d phased conv_stats, declined for its NaN) with the refusal lifted"
timeout 80 python3 nan_probe.py ../.kb/level2/15_ConvTranspose3d_BatchNorm_Subtract.py --stats-3d-phased 2>&1 | grep "^output\|Error" | cut -c1-200
cd ..
gpu_tests tests/test_gpu_conv.py stats_waves.log 200 -k "many_waves or batch_statistics_from_the_conv"
