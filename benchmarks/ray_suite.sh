#!/bin/bash
# On the GPU machine, from the repository root, after the install line of benchmarks/device_bundle.sh:
# the bundled suite through the plain bench and through `egg bench --ray`, then their comparison.
#   benchmarks/ray_suite.sh plain      one process, one shared evaluation worker
#   benchmarks/ray_suite.sh ray        a local Ray, one actor per visible GPU (all of them)
#   benchmarks/ray_suite.sh ray1       the same on one GPU of the machine (CUDA_VISIBLE_DEVICES=0)
#   benchmarks/ray_suite.sh compare    `egg bench --compare` of what the phases above left
# Results go to bench_out/<phase>/ (kept while the machine is warm) and, when $OUT is set, to $OUT.
set -uo pipefail
phase=${1:?phase: plain, ray, ray1 or compare}
args=(tasks/suite --candidates-per-stage 2 --reps 30)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
out=${OUT:-bench_out}
run() {  # name, then extra egg arguments
  local name=$1; shift
  rm -rf "bench_out/$name"
  local t0=$(date +%s.%N)
  python3 -m graph.cli bench "${args[@]}" --out "bench_out/$name" "$@" 2>&1 | tee "$out/$name.log" |
    grep -E "^\[bench\] (ray|\[|[0-9]+/)|correct|Error|error" | tail -n 70
  echo "$name: $(python3 -c "import time; print(round(time.time() - $t0, 1))") s wall, the process included"
  cp "bench_out/$name/results.json" "$out/${name}_results.json" 2>/dev/null
  cp "bench_out/$name/results.md" "$out/${name}_results.md" 2>/dev/null
}
case $phase in
  plain) nvidia-smi -L; run plain ;;
  ray) nvidia-smi -L; run ray --ray ;;
  ray1) CUDA_VISIBLE_DEVICES=0 run ray1 --ray ;;
  compare)
    for b in ray ray1; do
      [ -f "bench_out/$b/results.json" ] && python3 -m graph.cli bench --compare bench_out/plain/results.json \
        "bench_out/$b/results.json" | tee "$out/compare_plain_$b.txt"
    done ;;
  *) echo "unknown phase $phase"; exit 2 ;;
esac
