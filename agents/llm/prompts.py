"""Stage prompts: the stage's principles, the hardware profile, the roofline analysis, the
inter-stage record and the intra-stage log, within a context budget (recent attempts
verbatim, older ones summarized in a line each)."""
from __future__ import annotations

from agents import principles
from agents.protocol import StageRequest
from state import StageAttempt

SYSTEM = """You are a CUDA kernel engineer. You rewrite a PyTorch reference as CUDA kernels for one GPU,
one optimization stage at a time. Reply with JSON matching the schema you are given. The host code is Python
defining `class ModelNew(nn.Module)` with the reference's forward signature; it may use only `torch`, `nn`, `np`
and the injected `egg` object: `egg.empty(shape, dtype, device)` to allocate outputs and
`egg.launch(kernel_name, grid, block, [args...], shared_mem=0)` to launch on torch's current stream
(tensors pass as pointers, Python ints as 64-bit `long long`, floats as `float`); for many small launches,
`return egg.graphed(self, self.run_kernels, [inputs...])` replays a method that allocates and launches
them (and returns the output) as one CUDA graph; `egg.staged(self, self.stage_params, [tensors...])` runs a method
whose launches read only the module's weights (a weight relaid out once) again only when those tensors changed. Never compute with torch
inside forward: a guard rejects any torch compute op. The host code is checked before it runs: imports only of
math, torch, torch.nn, numpy; no names or attributes starting with `_`; no getattr/eval/globals/id; no torch.cuda,
streams, events or backends; attributes assigned on `self` only; classes derive from nn.Module only.
Every kernel is verified against a float64 reference on fresh random inputs, including signed inputs beyond the
task's own distribution; its error must stay within a small multiple of PyTorch's own. A last trial puts NaN in the
inputs: the output must be NaN where PyTorch's is, so write relu, clamp and max/min as comparisons a NaN passes
through (`x < 0.0f ? 0.0f : x`), not fmaxf/fminf, which drop it."""


def _attempt_line(a: StageAttempt) -> str:
    t = f"{a.median_ms:.4f} ms" if a.median_ms is not None else "-"
    return f"{a.candidate_id} {a.params}: {a.verdict} {t} {a.reason[:100]}"


def _attempt_full(a: StageAttempt) -> str:
    lines = [f"- candidate {a.candidate_id} params={a.params}", f"  verdict: {a.verdict}; time: "
             f"{a.median_ms if a.median_ms is not None else '-'} ms"]
    if a.reason:
        lines.append(f"  reason: {a.reason}")
    for e in a.compile_errors:
        lines.append(f"  compile error: {e}")
    return "\n".join(lines)


def context_sections(req: StageRequest, task_source: str, budget_chars: int = 24000, recent: int = 3,
                     feedback: str = "") -> list[tuple[str, str]]:
    st = req.stage
    p = req.profile
    sections = [
        ("Stage", f"{st} (round {req.round}). Propose at most {req.max_candidates} kernel(s); change only this "
                  f"stage's knobs."),
        ("Principles for this stage", "\n".join(f"- {x}" for x in principles.principles(st))),
        ("Hardware", f"{p.name}: {p.sms} SMs, sm {p.compute_capability} ({p.arch}), {p.shared_per_block_optin} B "
                     f"shared memory per block, {p.registers_per_sm} registers per SM, L2 {p.l2_bytes} B, "
                     f"{p.bandwidth() / 1e12:.2f} TB/s, fp32 {p.flops('float32') / 1e12:.1f} TFLOP/s, bf16 "
                     f"{p.flops('bfloat16') / 1e12:.0f} TFLOP/s; features: {', '.join(p.features)}"),
    ]
    if req.analysis:
        a, rf = req.analysis, req.analysis.roofline
        sections.append(("Roofline analysis",
                         f"{rf.bound}-bound: {rf.flops:.3g} FLOP, {rf.bytes_moved:.3g} bytes; floor {rf.floor_ms:.4f} ms; "
                         f"PyTorch eager {a.eager_ms} ms, torch.compile {a.compile_ms} ms; inputs "
                         f"{[(t.shape, t.dtype) for t in a.inputs]}, outputs {[(t.shape, t.dtype) for t in a.outputs]}"))
    d = req.design
    if d.decisions:
        sections.append(("Decisions so far (inter-stage record)",
                         "\n".join(f"- {x.stage}: chose {x.chosen_id} params={x.params} best={x.best_ms} ms "
                                   f"{'(improved)' if x.improved else '(kept input)'} {x.note}" for x in d.decisions)
                         + (f"\nPlan: {d.plan}" if d.plan else "")))
    if req.best is not None:
        sections.append(("The best kernel so far (start from it)",
                         f"params={req.best.params}\n```cuda\n{req.best.cuda_source}\n```\n```python\n"
                         f"{req.best.host_code}\n```"))
    if len(req.best_kernel_ms) > 1:
        sections.append(("That kernel's launches, timed one by one (spend the effort where the time goes)",
                         ", ".join(f"{k} {ms:.3f} ms" for k, ms in req.best_kernel_ms.items())))
    if req.best_profile is not None and req.best_profile.available:
        sections.append(("Nsight Compute profile of that kernel (where its time goes)",
                         req.best_profile.summary() + "\nRead it before choosing: a memory-bound kernel wants fewer or "
                         "wider memory transactions, a latency-bound one more warps in flight or deeper pipelining, a "
                         "busy integer/load pipe fewer address and load instructions."))
    sections.append(("The PyTorch reference", f"```python\n{task_source}\n```"))
    att = req.attempts
    old, new = att[:-recent] if len(att) > recent else [], att[-recent:]
    if old:
        sections.append(("Earlier attempts in this stage (summarized)", "\n".join(_attempt_line(a) for a in old)))
    if new:
        sections.append(("Latest attempts in this stage", "\n".join(_attempt_full(a) for a in new)))
    if feedback:
        sections.append(("Your previous reply could not be used", feedback))
    return _fit(sections, budget_chars)


def _fit(sections: list[tuple[str, str]], budget: int) -> list[tuple[str, str]]:
    """Shrink the largest sections (never the stage line or the feedback) until the total fits.
    Summaries of older attempts lose their oldest lines first; other sections keep their head."""
    def size():
        return sum(len(t) + len(b) + 8 for t, b in sections)
    fixed = {"Stage", "Your previous reply could not be used"}
    mark = "[... trimmed to fit the context budget]"
    while size() > budget:
        movable = [j for j, (t, b) in enumerate(sections) if t not in fixed and len(b) > 200 + len(mark) + 2]
        if not movable:
            break
        i = max(movable, key=lambda j: len(sections[j][1]))
        t, b = sections[i]
        keep = max(200, len(b) - (size() - budget) - len(mark) - 2)
        b = (mark + "\n" + b[-keep:]) if t.startswith("Earlier attempts") else (b[:keep] + "\n" + mark)
        sections[i] = (t, b)
    return sections


def render(sections: list[tuple[str, str]]) -> str:
    return "\n\n".join(f"## {t}\n{b}" for t, b in sections)
