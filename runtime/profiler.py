"""Nsight Compute on one candidate: a fresh process (this module's `__main__`) loads the candidate
exactly as the verifier's worker does and runs its forward once; `ncu` wraps that process and
profiles the candidate's own kernels (replayed with caches flushed). Its text report ("details"
page) is parsed into a KernelProfile. Absent gracefully: no ncu, no counters or a failure gives a
profile with `available=False` and the reason."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from state.candidate import KernelCandidate
from state.profile import KernelProfile

SECTIONS = ["SpeedOfLight", "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "Occupancy", "LaunchStats",
            "WarpStateStats"]
STALL_METRIC = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
STALLS = ["long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "math_pipe_throttle", "wait",
          "not_selected", "lg_throttle", "dispatch_stall", "no_instruction"]
METRICS = [STALL_METRIC.format(s) for s in STALLS] + [
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "lts__t_sector_hit_rate.pct",
    "dram__bytes.sum"]

_HEADER = re.compile(r"^  (\S+) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\), Context")
_PIPE = re.compile(r"^(?:INF|OPT|WRN)\s+(.+?) is the highest-utilized pipeline \(([\d.]+)%\)")
_TIME = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3, "second": 1e3}
_BYTES = {"byte": 1, "Kbyte": 1e3, "KB": 1024, "Mbyte": 1e6, "MB": 1024 ** 2, "Gbyte": 1e9, "GB": 1024 ** 3}


def ncu_path() -> str | None:
    found = shutil.which("ncu")
    if found:
        return found
    hits = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob("/usr/local/cuda*/bin/ncu"))
    return hits[-1] if hits else None


def parse_details(text: str) -> dict[str, dict[str, tuple[str, float]]]:
    """ncu's details page -> {kernel: {metric name: (unit, value)}} (the last launch of a kernel
    wins), with the busiest-pipe rule as the pseudo-metric 'busiest pipe: NAME'."""
    out: dict[str, dict[str, tuple[str, float]]] = {}
    cur: dict[str, tuple[str, float]] | None = None
    rule = ""
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            cur = out[m.group(1)] = {}
            continue
        if cur is None:
            continue
        stripped = line.strip()
        if stripped.startswith(("INF", "OPT", "WRN")):
            rule = stripped
        elif rule and line.startswith("          ") and stripped:
            rule += " " + stripped
        else:
            rule = ""
        if rule:
            p = _PIPE.search(rule)
            if p:
                cur[f"busiest pipe: {p.group(1).strip()}"] = ("%", float(p.group(2)))
            continue
        if not line.startswith("    ") or stripped.startswith(("Section:", "---", "Metric Name", "Warning")):
            continue
        parts = re.split(r"\s{2,}", stripped)
        if len(parts) < 2:
            continue
        name, unit, value = (parts[0], "", parts[1]) if len(parts) == 2 else (parts[0], parts[1], parts[-1])
        try:
            v = float(value.replace(",", ""))
        except ValueError:
            continue
        if name in cur and cur[name][0] != unit:  # one name, two sections (Memory Throughput: % in
            name = f"{name} [{unit}]"  # SpeedOfLight, Gbyte/s in MemoryWorkloadAnalysis): the first keeps it
        cur[name] = (unit, v)
    return out


def _get(m: dict, name: str) -> float | None:
    v = m.get(name)
    return None if v is None else v[1]


def _bytes(m: dict, name: str) -> float | None:
    v = m.get(name)
    return None if v is None else v[1] * _BYTES.get(v[0].split("/")[0], 1)


def to_profile(candidate_id: str, kernel: str, m: dict[str, tuple[str, float]]) -> KernelProfile:
    dur = m.get("Duration")
    smem = sum(_bytes(m, k) or 0.0 for k in ("Static Shared Memory Per Block", "Dynamic Shared Memory Per Block"))
    pipe = next(((k.split(": ", 1)[1], v[1]) for k, v in m.items() if k.startswith("busiest pipe: ")), ("", None))
    stalls = {s: v for s in STALLS if (v := _get(m, STALL_METRIC.format(s))) is not None}
    regs = _get(m, "Registers Per Thread")
    return KernelProfile(
        candidate_id=candidate_id, kernel=kernel,
        duration_ms=dur[1] * _TIME.get(dur[0], 1.0) if dur else None,
        sm_pct=_get(m, "Compute (SM) Throughput"), memory_pct=_get(m, "Memory Throughput"),
        dram_pct=_get(m, "DRAM Throughput"), l1_pct=_get(m, "L1/TEX Cache Throughput"),
        l2_pct=_get(m, "L2 Cache Throughput"),
        l2_hit_pct=_get(m, "lts__t_sector_hit_rate.pct") or _get(m, "L2 Hit Rate"),
        achieved_occupancy_pct=_get(m, "Achieved Occupancy"), theoretical_occupancy_pct=_get(m, "Theoretical Occupancy"),
        registers=int(regs) if regs is not None else None, shared_bytes=int(smem) if smem else None,
        ipc=_get(m, "Executed Ipc Active"), warp_cycles_per_issue=_get(m, "Warp Cycles Per Issued Instruction"),
        busiest_pipe=pipe[0], busiest_pipe_pct=pipe[1],
        tensor_pipe_pct=_get(m, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"),
        dram_bytes=_bytes(m, "dram__bytes.sum"),
        stalls=dict(sorted(stalls.items(), key=lambda kv: -kv[1])[:5]))


def profile_from_report(candidate_id: str, text: str, kernel_names: list[str]) -> KernelProfile:
    """The candidate's profile from a details report: the longest of its own kernels, the others listed."""
    parsed = {k: v for k, v in parse_details(text).items() if k in kernel_names}
    if not parsed:
        err = next((ln.strip() for ln in text.splitlines() if "==ERROR==" in ln), "")
        # the driver's own exception (ncu says only "returned an error code (1)"): its last line, e.g. an out-of-memory
        exc = next((ln.strip() for ln in reversed(text.splitlines()) if re.match(r"[\w.]+(Error|Exception)\b[^:]*:", ln.strip())), "")
        return KernelProfile(candidate_id=candidate_id, available=False,
                             note="; ".join(x for x in (err, exc) if x)[:300] or "ncu reported none of the candidate's kernels")
    profs = [to_profile(candidate_id, k, m) for k, m in parsed.items()]
    profs.sort(key=lambda p: -(p.duration_ms or 0.0))
    main = profs[0]
    main.other_kernels = [f"{p.kernel}: {p.duration_ms:.4f} ms" if p.duration_ms is not None else p.kernel for p in profs[1:]]
    return main


def ncu_command(ncu: str, kernel_names: list[str], driver: list[str], metrics: bool = True) -> list[str]:
    names = "|".join(re.escape(n) for n in kernel_names)
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "-k", f"regex:^({names})$",
           "--launch-count", str(4 * len(kernel_names))]
    for s in SECTIONS:
        cmd += ["--section", s]
    if metrics:
        cmd += ["--metrics", ",".join(METRICS)]
    return cmd + driver


def profile_candidate(task_path: str, cand: KernelCandidate, arch: str | None = None,
                      timeout_s: float = 300.0, kernels: list[str] | None = None) -> KernelProfile:
    """ncu on the candidate's kernels, or on `kernels` among them (a whole network's program launches a
    hundred kernels; ncu replays each launch it profiles some forty times)."""
    names = [n for n in cand.kernel_names if n in kernels] if kernels else cand.kernel_names
    ncu = ncu_path()
    if ncu is None:
        return KernelProfile(candidate_id=cand.id, available=False, note="Nsight Compute (ncu) not found")
    with tempfile.TemporaryDirectory(prefix="egg_ncu_") as tmp:
        cj = Path(tmp) / "candidate.json"
        cj.write_text(cand.model_dump_json())
        driver = [sys.executable, "-m", "runtime.profiler", str(task_path), str(cj)] + ([arch] if arch else [])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                            os.environ.get("PYTHONPATH", "")])}
        text = ""
        for metrics in (True, False):  # a metric this ncu or GPU lacks fails the run: retry on sections alone
            try:
                r = subprocess.run(ncu_command(ncu, names, driver, metrics), capture_output=True, text=True,
                                   timeout=timeout_s, env=env)
            except subprocess.TimeoutExpired:
                return KernelProfile(candidate_id=cand.id, available=False, note=f"ncu took over {timeout_s:.0f} s")
            text = r.stdout + "\n" + r.stderr
            prof = profile_from_report(cand.id, text, names)
            if prof.available:
                return prof
        return prof


def _drive(task_path: str, cand_path: str, arch: str | None) -> int:
    """Under ncu: load the candidate as the verifier does and run its forward once on the task's inputs."""
    import torch

    from runtime.worker import Worker
    from state import Evaluation, Verdict
    cand = KernelCandidate.model_validate(json.loads(Path(cand_path).read_text()))
    w = Worker()
    w.setup({"task": task_path})
    ev = Evaluation(candidate_id=cand.id, stage=cand.stage, verdict=Verdict.crashed)
    loaded = w._load(cand, ev, {"arch": arch})
    if loaded is None:
        print(f"==ERROR== the candidate did not load: {ev.reason}", file=sys.stderr)
        return 2
    _, model = loaded
    xs = w.task.make_inputs(7, "cuda")
    with torch.no_grad():
        model(*xs)
    torch.cuda.synchronize()
    return 0


if __name__ == "__main__":
    sys.exit(_drive(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None))
