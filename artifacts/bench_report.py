"""results.json, results.md and results.png for a bench, and the comparison of two runs."""
from __future__ import annotations

import math
from pathlib import Path

from state import STAGES
from state.bench import BenchResults, BenchSummary, TaskResult

P_VALUES = (0.0, 1.0, 1.5, 2.0)


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


FAMILIES = (  # (family, aten op name fragments): the first that matches a task's ops names its family
    ("conv", ("convolution", "conv")), ("attention", ("scaled_dot_product",)),
    ("gemm", ("mm", "bmm", "addmm", "linear", "matmul", "einsum")),
    ("scan", ("cumsum", "cumprod")), ("pool", ("pool",)),  # the expert's own family names where they exist
    ("norm", ("norm", "batch_norm", "group_norm", "instance_norm", "layer_norm")),
    ("loss", ("loss", "cross_entropy", "kl_div", "nll", "margin", "cosine_similarity")),
    ("rows", ("softmax", "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "logsumexp", "var", "std")),
)


KERNEL_FAMILY = {"conv_rows": "conv", "conv_pooled": "conv", "conv_stats": "conv", "conv_sum": "conv", "direct_conv": "conv",
                 "gemm_sum": "gemm"}  # by-family rows: the operator's family (issue 17 judges level 2's convolution-led
# tasks together, whichever kernel took them)


def op_family(ops: list[str]) -> str:
    """The operator family of a task from its reference's aten ops (for results by family)."""
    names = [o.split("::")[-1].split(".")[0].lower() for o in ops]
    for fam, keys in FAMILIES:
        if any(k == n or (len(k) >= 4 and k in n) for n in names for k in keys):  # avg_pool2d is a pool
            return fam
    return "pointwise" if names else "-"


def failure_reason(r: TaskResult) -> str:
    """A short, countable reason for a task that did not verify."""
    m = r.message
    if r.status == "unsupported":
        return "unsupported: " + m.split(":", 1)[-1].strip().split(" (")[0][:60]
    for key in ("out of memory", "no correct kernel", "reference raised", "timed_out", "crashed"):
        if key in m:
            return f"{r.status}: {key}"
    return f"{r.status}: {m[:60]}"


def summarize(results: list[TaskResult]) -> BenchSummary:
    n = len(results)
    ok = [r for r in results if r.correct]

    def fast(attr, p):
        return sum(1 for r in ok if (getattr(r, attr) or 0) > p) / n if n else 0.0
    pol: dict[str, int] = {}
    for r in ok:
        pol[r.guard_policy or "strict"] = pol.get(r.guard_policy or "strict", 0) + 1
    return BenchSummary(tasks=n, correct=len(ok), correctness_rate=len(ok) / n if n else 0.0,
                        fast_p_eager={str(p): fast("speedup_vs_eager", p) for p in P_VALUES},
                        fast_p_compile={str(p): fast("speedup_vs_compile", p) for p in P_VALUES},
                        geomean_speedup_eager=_geomean([r.speedup_vs_eager for r in ok]),
                        geomean_speedup_compile=_geomean([r.speedup_vs_compile for r in ok]), by_policy=pol)


TOP_KERNELS = 3  # a program's kernels named in the report's table of where its time goes


def _f(x, nd=3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def markdown(res: BenchResults) -> str:
    s = res.summary
    lines = [f"# EGG bench: {res.device}, {res.date}, commit {res.commit}, agent {res.agent}", "",
             f"- correct: {s.correct}/{s.tasks} ({100 * s.correctness_rate:.1f}%); by guard policy: {s.by_policy}",
             f"- geometric-mean speedup over correct tasks: x{_f(s.geomean_speedup_eager, 2)} vs eager, "
             f"x{_f(s.geomean_speedup_compile, 2)} vs torch.compile",
             f"- wall time: {_f(res.wall_s, 0)} s for {s.tasks} tasks over {res.slots} slot(s)",
             f"- correctness rule: {res.tolerance}" + (" (error vs a float64 truth within a multiple of eager's own)"
                                                      if res.tolerance == "float64" else
                                                      " (KernelBench's torch.allclose vs eager, 5 trials)"), "",
             "| fast_p (share of all tasks correct and faster than p x) | " + " | ".join(f"p={p}" for p in s.fast_p_eager) + " |",
             "|---|" + "---|" * len(s.fast_p_eager),
             "| vs eager | " + " | ".join(f"{100 * v:.1f}%" for v in s.fast_p_eager.values()) + " |",
             "| vs torch.compile | " + " | ".join(f"{100 * v:.1f}%" for v in s.fast_p_compile.values()) + " |", "",
             "| task | status | eager ms | compile ms | EGG ms | x eager | x compile | % of roofline | bound | family |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res.results:
        lines.append(f"| {r.task} | {r.status} | {_f(r.eager_ms, 4)} | {_f(r.compile_ms, 4)} | {_f(r.egg_ms, 4)} | "
                     f"{_f(r.speedup_vs_eager, 2)} | {_f(r.speedup_vs_compile, 2)} | "
                     f"{'-' if r.roofline_fraction is None else f'{100 * r.roofline_fraction:.0f}%'} | {r.bound or '-'} | "
                     f"{r.family or '-'} |")
    lines += ["", "## By family", "", "| family | tasks | verified | geomean x eager | geomean x compile | "
              "% of roofline (least, median) |", "|---|---|---|---|---|---|"]
    fams: dict[str, list[TaskResult]] = {}
    for r in res.results:
        fams.setdefault(KERNEL_FAMILY.get(r.family, r.family) or "-", []).append(r)
    for fam, rs in sorted(fams.items()):
        ok = [r for r in rs if r.correct]
        roof = sorted(r.roofline_fraction for r in ok if r.roofline_fraction is not None)  # a family's bar is its least
        lines.append(f"| {fam} | {len(rs)} | {len(ok)} | {_f(_geomean([r.speedup_vs_eager for r in ok]), 2)} | "
                     f"{_f(_geomean([r.speedup_vs_compile for r in ok]), 2)} | "
                     + (f"{100 * roof[0]:.0f}%, {100 * roof[len(roof) // 2]:.0f}% |" if roof else "- |"))
    bad = [r for r in res.results if not r.correct]
    if bad:
        reasons: dict[str, int] = {}
        for r in bad:
            reasons[failure_reason(r)] = reasons.get(failure_reason(r), 0) + 1
        lines += ["", "## Why not verified", "", "| reason | tasks |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in sorted(reasons.items(), key=lambda kv: -kv[1])]
        lines += ["", "## Not verified", ""] + [f"- {r.task}: {r.status}: {r.message}" for r in bad]
    errs = [r for r in res.results if r.correct and r.cand_err is not None]
    if errs:
        lines += ["", "## Error vs float64 (worst trial), candidate and eager; memory peak over eager's", "",
                  "| task | candidate | eager | peak / eager |", "|---|---|---|---|"]
        lines += [f"| {r.task} | {r.cand_err:.2e} | {r.eager_err:.2e} | {_f(r.peak_ratio, 2)} |" for r in errs]
    prof = [r for r in res.results if r.correct and r.profile]
    if prof:  # what the verification node's Nsight Compute run said of each best candidate
        lines += ["", "## Profile of the best candidate (Nsight Compute)", "", "| task | profile |", "|---|---|"]
        lines += [f"| {r.task} | {r.profile} |" for r in prof]
    progs = [r for r in res.results if r.correct and len(r.kernel_ms) > 1]
    if progs:  # issue 19: where a program's time goes, region by region (its kernels, timed back to back)
        lines += ["", f"## Where each program's time goes (its {TOP_KERNELS} slowest kernels: ms, share of the kernels' sum)", "",
                  "| task | kernels | sum ms | call ms | slowest |", "|---|---|---|---|---|"]
        for r in progs:
            tot = sum(r.kernel_ms.values())
            top = sorted(r.kernel_ms.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
            lines.append(f"| {r.task} | {len(r.kernel_ms)} | {tot:.3f} | {_f(r.egg_ms)} | "
                         + ", ".join(f"{k} {ms:.3f} ({ms / tot:.0%})" for k, ms in top) + " |")
    lines += ["", "## Best time after each stage (ms)", "", "| task | " + " | ".join(STAGES) + " |",
              "|---|" + "---|" * len(STAGES)]
    for r in res.results:
        if r.correct:
            lines.append(f"| {r.task} | " + " | ".join(_f(r.stage_best_ms.get(s), 4) for s in STAGES) + " |")
    return "\n".join(lines) + "\n"


def plot(res: BenchResults, path: Path) -> bool:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    ok = [r for r in res.results if r.correct]
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(max(8, 0.35 * len(res.results)), 9))
    names = [r.task for r in res.results]
    x = range(len(names))
    a1.bar([i - 0.2 for i in x], [r.speedup_vs_eager or 0 for r in res.results], 0.4, label="vs eager")
    a1.bar([i + 0.2 for i in x], [r.speedup_vs_compile or 0 for r in res.results], 0.4, label="vs torch.compile")
    a1.axhline(1.0, color="k", lw=0.8)
    a1.set_xticks(list(x), names, rotation=75, fontsize=7)
    a1.set_ylabel("speedup (0 = not verified)")
    a1.set_title(f"EGG speedup per task ({res.device}, {res.date}, {res.commit})")
    a1.legend()
    for r in ok:
        base = r.stage_best_ms.get("algorithm_design")
        ys = [base / r.stage_best_ms[s] if base and r.stage_best_ms.get(s) else None for s in STAGES]
        a2.plot(range(len(STAGES)), [y or float("nan") for y in ys], marker="o", alpha=0.5, lw=1)
    a2.set_xticks(range(len(STAGES)), STAGES)
    a2.set_ylabel("speedup over the first correct kernel")
    a2.set_title("improvement stage by stage (one line per verified task)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_reports(res: BenchResults, out: Path, with_plot: bool = True) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(res.model_dump_json(indent=2))
    (out / "results.md").write_text(markdown(res))
    if with_plot:
        plot(res, out / "results.png")


def _paired(ra: dict, rb: dict) -> dict:
    """A's results keyed as B names the same task: a key of one that is a path suffix of exactly one key of
    the other (`14_Gemm` and `level2/14_Gemm`: runs rooted at different folders) is the same task."""
    out = {}
    for t, r in ra.items():
        if t in rb:
            out[t] = r
            continue
        match = [u for u in rb if u not in ra and (u.endswith("/" + t) or t.endswith("/" + u))]
        out[match[0] if len(match) == 1 else t] = r
    return out


def compare(a: BenchResults, b: BenchResults) -> str:
    """What changed from run A to run B, task by task, and in the summary (the geomeans also over the
    tasks both verified, the like-for-like figure)."""
    rb = {r.task: r for r in b.results}
    ra = _paired({r.task: r for r in a.results}, rb)
    both = ra.keys() & rb.keys()
    ok = [t for t in both if ra[t].status == rb[t].status == "verified"]
    lines = [f"A: {a.device} {a.date} {a.commit}   B: {b.device} {b.date} {b.commit}",
             f"correct: {a.summary.correct}/{a.summary.tasks} -> {b.summary.correct}/{b.summary.tasks}",
             f"geomean vs eager: {_f(a.summary.geomean_speedup_eager, 2)} -> {_f(b.summary.geomean_speedup_eager, 2)}",
             f"geomean vs eager over the {len(ok)} task(s) verified in both: "
             f"{_f(_geomean([ra[t].speedup_vs_eager for t in ok]), 2)} -> {_f(_geomean([rb[t].speedup_vs_eager for t in ok]), 2)}",
             f"geomean vs torch.compile over the same task(s): {_f(_geomean([ra[t].speedup_vs_compile for t in ok]), 2)}"
             f" -> {_f(_geomean([rb[t].speedup_vs_compile for t in ok]), 2)}",
             f"wall time: {_f(a.wall_s, 0)} s over {a.slots} slot(s) -> {_f(b.wall_s, 0)} s over {b.slots} slot(s)"
             + (f" (B/A {b.wall_s / a.wall_s:.2f})" if a.wall_s and b.wall_s else ""),
             f"same verdict: {sum(ra[t].status == rb[t].status for t in both)}/{len(both)} tasks in both",
             f"{'task':36s} {'A status':12s} {'B status':12s} {'A x eager':>9s} {'B x eager':>9s} {'A x comp':>9s} {'B x comp':>9s}"]
    if a.device != b.device:  # times differ by the card; the ratios to eager and compile timed beside still compare
        lines.insert(1, f"note: different GPUs ({a.device} / {b.device}): compare the ratios, not the times")
    for r in b.results:
        o = ra.get(r.task)
        if o is None:
            lines.append(f"{r.task:36s} {'(new)':12s} {r.status:12s} {'':>9s} {_f(r.speedup_vs_eager, 2):>9s} "
                         f"{'':>9s} {_f(r.speedup_vs_compile, 2):>9s}")
        elif o.status != r.status or o.speedup_vs_eager != r.speedup_vs_eager:
            lines.append(f"{r.task:36s} {o.status:12s} {r.status:12s} {_f(o.speedup_vs_eager, 2):>9s} "
                         f"{_f(r.speedup_vs_eager, 2):>9s} {_f(o.speedup_vs_compile, 2):>9s} {_f(r.speedup_vs_compile, 2):>9s}")
    for t in sorted(ra.keys() - rb.keys()):
        lines.append(f"{t:36s} (only in A)")
    for name, run in (("A", a), ("B", b)):
        seen = [r.task for r in run.results]
        if dup := sorted({t for t in seen if seen.count(t) > 1}):
            lines.append(f"reported more than once in {name}: {', '.join(dup)}")
    return "\n".join(lines)
