"""Does a kernel of the expert's design read shared memory it never wrote? Runs the task's default design (or a
--vary of it) on the GPU as benchmarks/nan_probe.py does, but before each launch whose name matches --before fills
every SM's shared memory with NaN bytes (a kernel of --fill-blocks blocks, 200 KB each), then counts the NaN its
first argument holds. A kernel whose output is NaN-free on its own but NaN after the fill reads stale shared memory
(KernelBench level 3 task 27's conv_stats conv was NaN-free alone and NaN inside the network's program).

  python3 benchmarks/smem_poison_probe.py TASK [--vary JSON] [--before egg_conv]"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

FILL = r"""
extern "C" __global__ void egg_fill_smem(int words) {
    extern __shared__ unsigned int s[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) s[i] = 0xFFFFFFFFu;
    __syncthreads();
    if (s[(threadIdx.x * 7) % words] == 1u) s[0] = 0u;  // kept: the stores are not dead
}
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--vary", default="{}")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--before", default="egg_conv", help="fill shared memory before launches whose name starts so")
    ap.add_argument("--fill-blocks", type=int, default=1056)
    a = ap.parse_args()
    import cupy
    import torch

    from hardware_profiles.profile import detect
    from kernel_probe import candidate, expert_design
    from runtime.kernel_api import KernelAPI
    from runtime.worker import Worker
    from state import Evaluation, Verdict

    fill = cupy.RawKernel(FILL, "egg_fill_smem")
    smem = 200 * 1024
    fill.max_dynamic_shared_size_bytes = smem
    agent, g, fam, plan, base = expert_design(a.task)
    prof = detect()
    pk = agent.emit(g, fam, plan, {**base, "graph": False, **json.loads(a.vary)}, prof)
    print(pk.description, flush=True)
    cand = candidate(pk, "smem-probe")
    launch = KernelAPI.launch

    def poisoned(self, name, grid, block, args, shared_mem=0):
        if name.startswith(a.before):
            fill((a.fill_blocks,), (256,), (cupy.int32(smem // 4),), shared_mem=smem)
        launch(self, name, grid, block, args, shared_mem)
        torch.cuda.synchronize()
        out = args[0]
        if isinstance(out, torch.Tensor) and out.is_floating_point():
            print(f"{name}: {int(torch.isnan(out).sum())} of {out.numel()} NaN", flush=True)
    KernelAPI.launch = poisoned
    w = Worker()
    w.setup({"task": a.task})
    ev = Evaluation(candidate_id=cand.id, stage="probe", verdict=Verdict.crashed)
    loaded = w._load(cand, ev, {"arch": prof.arch})
    if loaded is None:
        print("not loaded:", ev.reason)
        return
    _, model = loaded
    xs = w.task.make_inputs(a.seed, "cuda")
    with torch.no_grad():
        got = model(*xs)
    print(f"output: {int(torch.isnan(got).sum())} NaN", flush=True)


if __name__ == "__main__":
    main()
