#!/bin/bash
# Left for the next session (written in the twenty-first; carry [".whl", ".kb3", "bench_state"], with .kb3/level3 and .kb3/probe as
# benchmarks/NOTES.md "twenty-first session" describes). KernelBench level 3 task 27 (RegNet): its second stage's
# conv_stats conv leaves NaN on its first launch inside the program only. Which conv_stats kernels do it, whether
# eager module loading changes it, and whether the clean second launches are also accurate (the output line's
# max abs diff to eager, where no NaN is left).
. benchmarks/probe_lib.sh
echo "== kernel times behind the spin kernel (ace75db; the assertion was 3x the call before)"
python3 -m pytest -q -m gpu tests/test_gpu_conv.py -k timed_one_by_one 2>&1 | tail -3
cd benchmarks
V='{"family": "conv", "algo": "direct", "block": 256, "waves": 8, "ocb": 8, "graph": false}'
T=../.kb3/level3/27_RegNet.py
echo "== every conv_stats conv twice"
timeout 120 python3 nan_probe.py $T --vary "$V" --twice egg_conv_5 --twice egg_conv_6 --twice egg_conv_8 --twice egg_conv_9 \
  2>&1 | grep "^egg_conv_[0-9]\|^output" | cut -c1-160
echo "== eager module loading"
CUDA_MODULE_LOADING=EAGER timeout 120 python3 nan_probe.py $T --vary "$V" 2>&1 | grep "^egg_conv_5 \|^output" | cut -c1-160
cd ..
if [ "${S22_BUNDLED:-1}" = 1 ]; then
  echo "== the bundled whole models under the float64 rule (issue 19's GPU test; last run long ago)"
  timeout 400 python3 -m pytest -m gpu -q tests/test_gpu_expert.py -k bundled_whole_model 2>&1 | tail -4
fi
# Then the rest of the fetched level 3 (14 more files, NOTES "twenty-first session"; the 19 benched resume from
# bench_state/l3.sqlite.xz; carry bench_state too, and before the call: git rev-parse --short HEAD > bench_state/COMMIT).
# Task 17 reruns only if its checkpoint is cleared; the RNNs plan for 30-100 s each (torch.export unrolls them).
[ "${S22_BENCH:-1}" = 1 ] || exit 0  # S22_BENCH=0: the probes alone (the bench then gets its own call)
BENCH_NAME=l3 BENCH_PATHS=.kb3/level3 CPS=1 REPS=10 KB_SECONDS=420 bash benchmarks/kb_device.sh --total-candidates 1 --no-profile \
  | tail -3
