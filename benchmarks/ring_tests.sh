#!/bin/bash
# The GPU tests of the lead, bsplit and direct kernels (a7a2bd5+): the planes GEMM and B split in the ring
# under the float64 rule (lead and not), the bf16 wgmma GEMM's rings, every conv layout at awkward shapes
# (the wgmma conv with lead among them). About 300 s. Writes $OUT/ring_gpu_tests.txt. Carry [".whl", ".kb"].
set -uo pipefail
source benchmarks/probe_lib.sh
gpu_tests tests/test_gpu_conv.py ring_gpu_tests.txt 400 -k "wgmma16_rings or split_planes or every_layout"
