"""Variants of the expert's kernel for one task side by side with eager and torch.compile, on the GPU:
time (median of REPS, CUDA events), error norm-wise against a float64 truth, and with --ncu each
variant's Nsight Compute profile (its kernels' durations: a staged conv's staging kernels apart
from its GEMM). Faster than a bench for learning where a family's time goes.

  python3 benchmarks/kernel_probe.py TASK [--reps 20] [--ncu] [--kernels] [--no-compile] [--dump DIR] [--first] [--vary '{"layout": "nchw"}' ...]

--kernels lists the CUDA kernels eager, torch.compile and each variant launch and their times (torch.profiler): which
conv algorithm cuDNN picked, what Inductor fused around it, which of a variant's kernels takes its time.

Each --vary is merged into the expert's default parameters for the task's heavy kernel (with --first: into its first
algorithm-design candidate's, what a bench times first); none: those alone."""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _time(fn, reps: int) -> float:
    import torch
    for _ in range(3):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def _kernels(fn, reps: int = 5, top: int = 8) -> list[str]:
    """The CUDA kernels one call of fn launches, by their mean time over reps calls (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.device_time_total > 0]
    rows.sort(key=lambda e: -e.device_time_total)
    return [f"{e.key[:90]}: {e.device_time_total / reps / 1000:.4f} ms x{e.count // reps}" for e in rows[:top]]


def expert_design(task: str):
    """(agent, graph, family, plan, the default knobs of its tuned kernel): the expert's first design of `task`."""
    from agents.expert import ExpertAgent
    agent = ExpertAgent()
    g, fam, plan = agent._plan(task)
    tfam, tg, tplan = fam, g, plan
    if fam == "program":
        tg, tfam, tplan, _ = plan.stages()[plan.tuned]
    return agent, g, fam, plan, agent._default(tfam, tg, tplan, None)


def first_params(agent, task: str, prof) -> dict:
    """The knobs of the expert's first algorithm-design candidate for `task` on `prof` (a bench's first candidate: for
    a forward conv the TMA conv, which the template's defaults are not)."""
    from agents import StageRequest
    from state import DesignRecord
    from tasks import load_task, task_spec
    req = StageRequest(stage="algorithm_design", round=1, task=task_spec(load_task(task)), analysis=None, profile=prof,
                       design=DesignRecord(), attempts=[], best=None, max_candidates=1)
    return dict(agent.propose(req).kernels[0].params)


def candidate(pk, cid: str):
    """The proposed kernel `pk` as the runtime's candidate record (as the design node makes it)."""
    from state import KernelCandidate
    return KernelCandidate(id=cid, stage="probe", **pk.model_dump())


def _err(got, truth) -> float:
    return float((got.double() - truth).norm() / truth.norm())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--ncu", action="store_true")
    ap.add_argument("--vary", action="append", default=[], help="a variant's knobs (JSON) over the base design; a key "
                    "\"@FAMILY\" holds knobs for every untuned stage of that family in a program (e.g. "
                    "'{\"@recurrent\": {\"kchunk\": false, \"block\": 512}}')")
    ap.add_argument("--first", action="store_true", help="vary the first candidate's knobs, not the template's defaults")
    ap.add_argument("--kernels", action="store_true", help="eager's and torch.compile's CUDA kernels (torch.profiler)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile (its warm-up takes tens of seconds)")
    ap.add_argument("--dump", help="a folder for each variant's candidate JSON (probe-I.json), which "
                    "`ncu ... python3 -m runtime.profiler TASK probe-I.json` replays under a full profile")
    a = ap.parse_args()
    import torch

    from hardware_profiles.profile import detect
    from runtime.profiler import profile_candidate
    from runtime.worker import Worker
    from state import Evaluation, Verdict

    agent, g, fam, plan, base = expert_design(a.task)
    prof = detect()
    if a.first:
        base = first_params(agent, a.task, prof)
    w = Worker()
    w.setup({"task": a.task})
    xs = w.task.make_inputs(7, "cuda")
    with torch.no_grad():
        want = w.ref(*xs)
        truth = w._ref64("cuda")(*[x.double() if x.is_floating_point() else x for x in xs]).double()
        rows = [{"name": "eager", "ms": _time(lambda: w.ref(*xs), a.reps), "err": _err(want, truth)}]
        if not a.no_compile:
            comp = torch.compile(w.ref)
            rows.append({"name": "torch.compile", "ms": _time(lambda: comp(*xs), a.reps), "err": _err(comp(*xs), truth)})
        if a.kernels:
            rows[0]["kernels"] = _kernels(lambda: w.ref(*xs))
            if not a.no_compile:
                rows[1]["kernels"] = _kernels(lambda: comp(*xs))
    print(json.dumps(rows), flush=True)
    for i, v in enumerate(a.vary or ["{}"]):
        params = {**base, **json.loads(v)}
        for key in [k for k in params if k.startswith("@")]:  # "@FAMILY": knobs for each of a program's stages of it
            knobs = params.pop(key)
            stages = plan.stages() if fam == "program" else []
            params.update({f"r{s}.{n}": x for s, (_, f, _, _) in enumerate(stages) if f == key[1:] for n, x in knobs.items()})
        try:
            pk = agent.emit(g, fam, plan, params, prof)
        except Exception as exc:  # a variant the template declines
            rows.append({"name": v, "error": f"{type(exc).__name__}: {exc}"})
            continue
        cand = candidate(pk, f"probe-{i}")
        ev = Evaluation(candidate_id=cand.id, stage="probe", verdict=Verdict.crashed)
        loaded = w._load(cand, ev, {"arch": prof.arch})
        if loaded is None:
            rows.append({"name": v, "error": ev.reason})
            continue
        api, model = loaded
        if a.dump:
            Path(a.dump).mkdir(parents=True, exist_ok=True)
            (Path(a.dump) / f"{cand.id}.json").write_text(cand.model_dump_json())
        with torch.no_grad():
            got = model(*xs)  # its buffers poisoned (NaN), as the verifier runs it: an element no kernel writes shows
            api.poison = False  # timed as the bench times it: without the poisoning memsets (0.48 ms a call on task 1)
            row = {"name": v, "ms": _time(lambda m=model: m(*xs), a.reps), "err": _err(got, truth),  # the numbers first
                   "desc": pk.description, "regs": [(r.name, r.registers) for r in (ev.compile.resources if ev.compile else [])]}
            if a.kernels:  # where the variant's own time goes, kernel by kernel (a graphed program's too)
                row["kernels"] = _kernels(lambda m=model: m(*xs))
        if a.ncu:
            del got
            torch.cuda.empty_cache()  # the profiled process needs the memory this one's cache holds (task 87: 12 GB of tensors)
            p = profile_candidate(a.task, cand, prof.arch)  # sm_90a: wgmma candidates need it
            row["profile"] = p.summary()
            row["kernels"] = [f"{p.kernel}: {p.duration_ms}"] + list(p.other_kernels or [])
        rows.append(row)
        print(json.dumps(row, default=str), flush=True)
    print(json.dumps({"task": a.task, "family": fam, "rows": rows}, indent=1, default=str))


if __name__ == "__main__":
    main()
