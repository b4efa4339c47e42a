#!/bin/bash
# Issue 19, the conv_stats NaN continued (session23b.sh found: the first launch of RegNet's egg_conv_5/6 NaN, the
# second clean, with a cold L2 too and at one block an SM; racecheck reported one hazard, cut from its output).
# carry [".whl", ".kb3"].
. benchmarks/probe_lib.sh
echo "== dynamic shared base beside 4356 bytes of static shared"
python3 - <<'PY'
import cupy
src = r'''
extern "C" __global__ void base(unsigned* out) {
    extern __shared__ __align__(1024) unsigned char smem[];
    __shared__ int rowinfo[512]; __shared__ float st_red[8][64]; __shared__ float st_mean[64]; __shared__ int st_n;
    rowinfo[threadIdx.x] = threadIdx.x; st_red[threadIdx.x & 7][threadIdx.x & 63] = 1.f; st_mean[threadIdx.x & 63] = 2.f;
    if (threadIdx.x == 0) st_n = 3;
    smem[threadIdx.x] = 1;
    __syncthreads();
    if (threadIdx.x == 0) {
        out[blockIdx.x * 3] = (unsigned)__cvta_generic_to_shared(smem);
        out[blockIdx.x * 3 + 1] = (unsigned)__cvta_generic_to_shared(rowinfo);
        out[blockIdx.x * 3 + 2] = st_n + rowinfo[5] + (unsigned)st_red[1][1] + (unsigned)st_mean[2] + smem[7];
    }
}'''
k = cupy.RawModule(code=src).get_function("base")
for dyn in (73728, 98304, 147456):
    k.max_dynamic_shared_size_bytes = dyn
    o = cupy.zeros(264 * 3, dtype=cupy.uint32)
    k((264,), (512,), (o,), shared_mem=dyn)
    o = o.reshape(-1, 3).get()
    print(dyn, "dynamic base", sorted(set(int(v) for v in o[:, 0])), "static base", sorted(set(int(v) for v in o[:, 1])))
PY
cd benchmarks
V='{"family": "conv", "algo": "direct", "block": 256, "waves": 8, "ocb": 8, "graph": false}'
T=../.kb3/level3/27_RegNet.py
echo "== NaN-filled shared memory before both launches of egg_conv_5"
timeout 90 python3 nan_probe.py $T --vary "$V" --twice egg_conv_5 --fill-smem egg_conv_5 2>&1 \
  | grep "^egg_conv_5 \|^egg_conv_5(\|^output\|Error" | cut -c1-150
echo "== racecheck, egg_conv_5 alone"
timeout 200 compute-sanitizer --tool racecheck --racecheck-report hazard --kernel-name kns=egg_conv_5 --print-limit 8 \
  python3 nan_probe.py $T --vary "$V" > "$OUT/race.txt" 2>&1
grep -v "^egg_\|Warning\|^  \|^Traceback\|^torch\|^Search\|^CUDA\|^Compile\|^For debug" "$OUT/race.txt" | head -60 | cut -c1-220
echo "== initcheck, egg_conv_5 alone"
timeout 150 compute-sanitizer --tool initcheck --kernel-name kns=egg_conv_5 --print-limit 8 \
  python3 nan_probe.py $T --vary "$V" > "$OUT/init.txt" 2>&1
grep "=====" "$OUT/init.txt" | head -30 | cut -c1-220
