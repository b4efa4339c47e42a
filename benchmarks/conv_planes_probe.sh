#!/bin/bash
# 3xTF32 convs on the warpgroup MMA from staged TF32 planes (conv `planes`, eighth session): where eager's cuDNN
# runs an exact fp32 algorithm, the float64 rule wants fp32 grade, and the first design was 3xTF32 on mma.sync
# (about half the level-2 convs; level 2 task 57 0.74 ms of conv on the H100, task 90 5.76). First the GPU tests
# (every conv layout at awkward shapes, planes included), then each task's mma.sync 3xTF32 design beside the planes
# (3 stages, the ring a tile further ahead, 4 stages at 64 channels) and plain TF32 wgmma. Writes
# $OUT/planes_tests.txt and $OUT/planes_probe.txt (and transposed convs without a stride on the lean gather). Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_conv.py planes_tests.txt 180 -k "every_layout"
p='"split":3,"planes":true'
for t in 57_Conv2d_ReLU_HardSwish 87_Conv2d_Subtract_Subtract_Mish 90_Conv3d_LeakyReLU_Sum_Clamp_GELU; do
  probe planes_probe.txt .kb/level2/$t.py 50 --vary '{"wgmma":false,"swz":false,"split":3}' --vary "{$p}" \
    --vary "{$p,\"lead\":true}" --vary "{$p,\"BN\":64,\"stages\":4}" --vary '{}'
done
# transposed convs take the lean gather (eighth session), without a stride and by phase: at da39c3f level 1 task 69
# 3.33 ms (eager 2.80), task 65 2.97 (eager 2.72); level 2 task 5's conv 7.26 ms, task 16's 6.03
for t in level1/69_conv_transposed_2D__asymmetric_input__asymmetric_kernel level1/65_conv_transposed_2D__square_input__asymmetric_kernel \
    level2/5_ConvTranspose2d_Subtract_Tanh level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling; do
  probe planes_probe.txt .kb/$t.py 40 --vary '{}'
done
cat "$OUT/planes_probe.txt" | cut -c1-300
