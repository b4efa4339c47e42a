#!/bin/bash
# The nineteenth session's first call: the NaN rule on the GPU against eager CUDA (first designs of the families the
# eighteenth session changed), then benchmarks/session18c.sh's probes (tcols split, the pools' first designs, the
# NaN-keeping max/min's cost). Carry [".whl", ".kb"].
. benchmarks/probe_lib.sh
gpu_tests tests/test_nan_semantics.py nan.txt 150
gpu_tests tests/test_gpu_expert.py pool.txt 120 -k "pool or first_candidate"
bash benchmarks/session18c.sh
