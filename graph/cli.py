"""`egg`: optimize, resume, runs, history, hw. Bad input gets one clear line, never a traceback."""
from __future__ import annotations

import argparse
import json
import os
import sys

from agents import UnknownAgentError
from context import DEFAULT_PROFILE
from hardware_profiles import UnknownProfileError, detect, list_profiles, load_profile
from state import STAGES, Budget, LLMConfig
from tasks import TaskError


class CliError(Exception):
    pass


def _fmt_ms(x) -> str:
    return f"{x:.4f}" if x is not None else "-"


def cmd_optimize(a) -> int:
    from graph.runner import optimize
    budget = Budget(candidates_per_stage=a.candidates_per_stage, total_candidates=a.total_candidates,
                    algorithm_rounds=a.algorithm_rounds, tuning_rounds=a.tuning_rounds)
    tid, st = optimize(a.task_file, agent=a.agent, profile=a.profile, budget=budget, out_dir=a.out,
                       evaluator=a.evaluator, checkpoint=a.checkpoint, thread_id=a.thread, timing_reps=a.reps,
                       llm=_llm(a), review=a.review, reviewer=_terminal_reviewer() if a.review else None,
                       tolerance=a.tolerance, kernel_profile=not a.no_profile)
    _print_result(tid, st, a.checkpoint)
    return 0 if st.result and st.result.status in ("verified", "unverified") else 1


def _terminal_reviewer():
    """Ask at the terminal; with no terminal, leave the run paused (resume answers later)."""
    if not sys.stdin.isatty():
        return None

    def ask(pause: dict) -> dict:
        print(f"\n== review: {pause['stage']} (round {pause['round']}) ==\n{pause['plan']}")
        for i, c in enumerate(pause["candidates"]):
            print(f"  [{i}] {c['params']}  {c['description']}")
        while True:
            ans = input("approve [a], skip [s], or edit with JSON params list [e]: ").strip().lower()
            if ans in ("a", "approve", ""):
                return {"action": "approve"}
            if ans in ("s", "skip"):
                return {"action": "skip"}
            if ans in ("e", "edit"):
                try:
                    return {"action": "edit", "params": json.loads(input("params (a JSON list of objects): "))}
                except json.JSONDecodeError as exc:
                    print(f"not JSON: {exc}")
    return ask


def _print_result(tid, st, checkpoint=None) -> None:
    r = st.result
    print(f"thread: {tid}")
    if r is None:
        from graph.runner import pause_of
        pause = pause_of(tid, checkpoint) if st.settings.review else None
        if pause:
            print(f"status: paused for review before {pause['stage']} (round {pause['round']}): answer with "
                  f"`egg resume {tid} --approve`, `--skip` or `--edit JSON`")
        else:
            print(f"status: interrupted at {st.stage} (resume with `egg resume {tid}`)")
        return
    print(f"status: {r.status}  {r.message}")
    if r.best_ms is not None:
        print(f"best: {r.best_id}  {r.best_ms:.4f} ms  x{r.speedup_vs_eager or 0:.2f} vs eager  "
              f"x{r.speedup_vs_compile or 0:.2f} vs torch.compile")
    for k in ("kernel_path", "module_path", "report_path"):
        if getattr(r, k):
            print(f"{k.removesuffix('_path')}: {getattr(r, k)}")


def cmd_resume(a) -> int:
    from graph.runner import resume
    decision = None
    if a.edit is not None:
        try:
            decision = {"action": "edit", "params": json.loads(a.edit)}
        except json.JSONDecodeError as exc:
            raise CliError(f"--edit takes a JSON list of parameter objects: {exc}") from None
    elif a.skip:
        decision = {"action": "skip"}
    elif a.approve:
        decision = {"action": "approve"}
    st = resume(a.thread, checkpoint=a.checkpoint, decision=decision,
                reviewer=_terminal_reviewer() if decision is None else None, force=a.force)
    _print_result(a.thread, st, a.checkpoint)
    return 0 if st.result and st.result.status in ("verified", "unverified") else 1


def cmd_fork(a) -> int:
    from graph.runner import fork
    budget = None
    if a.candidates_per_stage is not None or a.total_candidates is not None:
        d = Budget()
        budget = Budget(candidates_per_stage=d.candidates_per_stage if a.candidates_per_stage is None else a.candidates_per_stage,
                        total_candidates=d.total_candidates if a.total_candidates is None else a.total_candidates)
    tid = fork(a.thread, a.stage, checkpoint=a.checkpoint, new_thread=a.new_thread, agent=a.agent, budget=budget)
    print(f"forked {a.thread} before {a.stage} as {tid}; run it with `egg resume {tid}`")
    return 0


def cmd_export(a) -> int:
    from graph.runner import export
    for k, v in export(a.thread, a.dir, a.checkpoint).items():
        print(f"{k.removesuffix('_path')}: {v}")
    return 0


def cmd_runs(a) -> int:
    from graph.runner import list_runs
    runs = list_runs(a.checkpoint)
    if not runs:
        print("no runs")
        return 0
    print(f"{'THREAD':40s} {'TASK':28s} {'STATUS':12s} {'STAGE':20s} BEST MS")
    for r in runs:
        print(f"{r.thread_id:40s} {r.task:28s} {r.status:12s} {r.stage:20s} {_fmt_ms(r.best_ms)}")
    return 0


def _heaviest(res: list, kernel_ms: dict | None):
    """The resources of a candidate's heaviest kernel: the slowest where its kernels were timed one by one, else the
    one with the most registers (a conv's staging kernels come first and are small)."""
    if not res:
        return None
    if kernel_ms:
        timed = [r for r in res if r.name in kernel_ms]
        if timed:
            return max(timed, key=lambda r: kernel_ms[r.name])
    return max(res, key=lambda r: r.registers or 0)


def cmd_history(a) -> int:
    from graph.runner import get_run
    st = get_run(a.thread, a.checkpoint)
    an = st.analysis
    print(f"thread {a.thread}: task {st.settings.task_path}")
    if st.settings.forked_from:
        print(f"  branch: forked from {st.settings.forked_from.replace('@', ' before ')}")
    if an:
        print(f"  analysis: {an.roofline.bound}-bound, floor {an.roofline.floor_ms:.4f} ms, "
              f"eager {_fmt_ms(an.eager_ms)} ms, torch.compile {_fmt_ms(an.compile_ms)} ms, on {an.device}")
    decisions = {d.stage: d for d in st.design.decisions}
    for stage in dict.fromkeys(at.stage for at in st.attempts):
        d = decisions.get(stage)
        head = (f"best {_fmt_ms(d.best_ms)} ms, {'improved' if d.improved else 'kept input'}, chosen {d.chosen_id}"
                if d else "in progress")
        print(f"  {stage}: {head}")
        for at in st.stage_attempts(stage):
            ev = st.evaluation(at.candidate_id)
            res = ev.compile.resources if ev and ev.compile else []
            r = _heaviest(res, ev.kernel_ms if ev else None)
            regs = f"{r.registers or '-':>3} regs {r.shared_total:>6} B smem" if r else " " * 19
            w = ev.correctness.worst if ev and ev.correctness else None
            err = f"  err {w.cand_norm:.1e} (eager {w.eager_norm:.1e})" if w else ""
            print(f"    {at.candidate_id:32s} {at.verdict:14s} {_fmt_ms(at.median_ms):>9s} {regs}  {at.params}  "
                  f"{at.reason[:80]}{err}")
            prof = st.kernel_profile(at.candidate_id)
            if prof is not None:
                print(f"      profile: {prof.summary()}")
            if ev and ev.kernel_ms:  # a program: where its time goes, kernel by kernel
                print("      kernels: " + ", ".join(f"{k} {ms:.3f} ms" for k, ms in ev.kernel_ms.items()))
            c = next((x for x in st.candidates if x.id == at.candidate_id), None)
            if c is not None and c.algorithm_flops is not None and an:  # an algebraic rewrite: its own floor
                print(f"      rewrite: {c.algorithm_flops:.3g} FLOP against the reference's {an.roofline.flops:.3g}; "
                      f"held to a floor of {an.roofline.floor_for(c.algorithm_flops):.4f} ms")
    if st.failure:
        print(f"  failure: {st.failure}")
    if st.result:
        print(f"  result: {st.result.status} {st.result.message}")
    return 0


def cmd_bench(a) -> int:
    from pathlib import Path

    from artifacts.bench_report import compare
    from graph.bench import bench
    from state.bench import BenchResults
    if a.compare:
        if len(a.paths) != 2:
            raise CliError("--compare takes two results.json files")
        runs = []
        for p in a.paths:
            if not Path(p).is_file():
                raise CliError(f"{p}: no such results file")
            try:
                runs.append(BenchResults.model_validate_json(Path(p).read_text()))
            except ValueError as exc:
                raise CliError(f"{p}: not an egg bench results.json ({str(exc).splitlines()[0]})") from None
        print(compare(*runs))
        return 0
    budget = Budget(candidates_per_stage=a.candidates_per_stage, total_candidates=a.total_candidates)
    if a.ray is not None:
        if a.no_compile or a.compile_mode != "default":
            raise CliError("--no-compile and --compile-mode are for a local bench (the Ray workers time torch.compile)")
        from graph.distributed import bench_ray
        res = bench_ray(a.paths, address=None if a.ray == "local" else a.ray, agent=a.agent, profile=a.profile,
                        budget=budget, out_dir=a.out, evaluator=a.evaluator, checkpoint=a.checkpoint,
                        timing_reps=a.reps, llm=_llm(a), tolerance=a.tolerance, kernel_profile=not a.no_profile)
    else:
        res = bench(a.paths, agent=a.agent, profile=a.profile, budget=budget, out_dir=a.out, evaluator=a.evaluator,
                    checkpoint=a.checkpoint, timing_reps=a.reps, llm=_llm(a), tolerance=a.tolerance,
                    kernel_profile=not a.no_profile,
                    compile_baseline=False if a.no_compile else True if a.compile_mode == "default" else a.compile_mode)
    s = res.summary
    geo = "-" if s.geomean_speedup_eager is None else f"{s.geomean_speedup_eager:.2f}"
    print(f"correct {s.correct}/{s.tasks}; fast_1 vs eager {100 * s.fast_p_eager['1.0']:.1f}%; "
          f"geomean x{geo} vs eager; report: {a.out}/results.md")
    return 0


def cmd_hw(a) -> int:
    if a.profile:
        p = load_profile(a.profile)
        src = "named"
    else:
        try:
            p, src = detect(), "detected"
        except RuntimeError:
            print(f"no CUDA device found: `egg optimize` compiles for the default {DEFAULT_PROFILE} profile "
                  f"(--profile NAME for another); known profiles: {', '.join(list_profiles())}")
            return 0
    print(f"{src}: {p.name} (sm {p.compute_capability}, {p.arch}), {p.sms} SMs, "
          f"{p.shared_per_block_optin // 1024} KiB smem/block, L2 {p.l2_bytes // 2**20} MiB, "
          f"{p.bandwidth() / 1e12:.2f} TB/s, fp32 {p.flops('float32') / 1e12:.1f} TFLOP/s, "
          f"bf16 {p.flops('bfloat16') / 1e12:.0f} TFLOP/s, features: {', '.join(p.features)}")
    return 0


def _add_llm_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LLM agents (openai:MODEL, hybrid:MODEL)")
    g.add_argument("--llm-base-url", default=None, help="OpenAI-compatible endpoint (default $OPENAI_BASE_URL)")
    g.add_argument("--llm-api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key")
    g.add_argument("--llm-temperature", type=float, default=LLMConfig().temperature)
    g.add_argument("--llm-max-tokens", type=int, default=LLMConfig().max_tokens)
    g.add_argument("--llm-timeout", type=float, default=LLMConfig().timeout_s, help="seconds per request")
    g.add_argument("--llm-retries", type=int, default=LLMConfig().max_retries, help="transport retries per request")


def _llm(a) -> LLMConfig:
    return LLMConfig(base_url=a.llm_base_url, api_key_env=a.llm_api_key_env, temperature=a.llm_temperature,
                     max_tokens=a.llm_max_tokens, timeout_s=a.llm_timeout, max_retries=a.llm_retries)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="egg", description="EGG: turn a PyTorch reference into a verified, faster CUDA kernel.")
    help_cp = "SQLite checkpoint file or postgresql:// URL (default .egg/checkpoints.sqlite or $EGG_CHECKPOINT)"
    p.add_argument("--checkpoint", default=None, help=help_cp)
    # global options are accepted after the subcommand too (`egg optimize T --checkpoint x`)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--checkpoint", default=argparse.SUPPRESS, help=help_cp)
    sub = p.add_subparsers(dest="cmd", required=True)
    _add = sub.add_parser
    sub.add_parser = lambda *a, **k: _add(*a, parents=[common], **k)
    o = sub.add_parser("optimize", help="optimize one KernelBench-format task file")
    o.add_argument("task_file")
    o.add_argument("--agent", default="expert", help="expert (default), openai:MODEL, hybrid:MODEL or module:factory")
    o.add_argument("--profile", default=None, help=f"hardware profile ({', '.join(list_profiles())}); default: detect")
    o.add_argument("--out", default="egg_out", help="folder for the kernel, module and report")
    o.add_argument("--thread", default=None, help="thread id (default: task name + random suffix)")
    o.add_argument("--evaluator", default="auto", choices=["auto", "gpu", "compile_only"])
    o.add_argument("--candidates-per-stage", type=int, default=Budget().candidates_per_stage)
    o.add_argument("--total-candidates", type=int, default=Budget().total_candidates)
    o.add_argument("--algorithm-rounds", type=int, default=Budget().algorithm_rounds)
    o.add_argument("--tuning-rounds", type=int, default=Budget().tuning_rounds)
    o.add_argument("--reps", type=int, default=50, help="timed repetitions per kernel and baseline")
    o.add_argument("--tolerance", default="float64", choices=["float64", "kernelbench"],
                     help="correctness rule: float64 (error vs a float64 truth within a multiple of eager's own; "
                          "default) or kernelbench (KernelBench's allclose vs eager, 5 trials)")
    o.add_argument("--no-profile", action="store_true",
                   help="do not profile each stage's best kernel with Nsight Compute (ncu) for the next stage")
    _add_llm_args(o)
    o.set_defaults(fn=cmd_optimize)
    o.add_argument("--review", action="store_true", help="pause before each stage to approve, edit or skip it")
    r = sub.add_parser("resume", help="continue an interrupted or paused run")
    r.add_argument("thread")
    r.add_argument("--approve", action="store_true", help="at a review pause: run the stage as planned")
    r.add_argument("--skip", action="store_true", help="at a review pause: skip the stage (keep its input)")
    r.add_argument("--edit", default=None, metavar="JSON", help='at a review pause: e.g. \'[{"block": 512}]\'')
    r.add_argument("--force", action="store_true", help="the task file changed since the run started: go on with "
                                                      "the copy the run stored")
    r.set_defaults(fn=cmd_resume)
    f = sub.add_parser("fork", help="time travel: a new branch from the checkpoint before a stage")
    f.add_argument("thread")
    f.add_argument("--stage", required=True, choices=STAGES)
    f.add_argument("--new-thread", default=None)
    f.add_argument("--agent", default=None, help="another agent for the branch")
    f.add_argument("--candidates-per-stage", type=int, default=None)
    f.add_argument("--total-candidates", type=int, default=None)
    f.set_defaults(fn=cmd_fork)
    e = sub.add_parser("export", help="write the best kernel, a standalone ModelNew module and the report")
    e.add_argument("thread")
    e.add_argument("dir")
    e.set_defaults(fn=cmd_export)
    sub.add_parser("runs", help="list runs in the checkpoint file").set_defaults(fn=cmd_runs)
    h = sub.add_parser("history", help="stages, candidates and verdicts of a run")
    h.add_argument("thread")
    h.set_defaults(fn=cmd_history)
    bn = sub.add_parser("bench", help="run every task under the paths (resumable); or --compare A.json B.json")
    bn.add_argument("paths", nargs="+")
    bn.add_argument("--compare", action="store_true", help="print the difference between two results.json files")
    bn.add_argument("--agent", default="expert")
    bn.add_argument("--profile", default=None)
    bn.add_argument("--out", default="bench_out", help="folder for results.json/.md/.png, kernels and checkpoints")
    bn.add_argument("--evaluator", default="auto", choices=["auto", "gpu", "compile_only"])
    bn.add_argument("--candidates-per-stage", type=int, default=Budget().candidates_per_stage)
    bn.add_argument("--total-candidates", type=int, default=Budget().total_candidates)
    bn.add_argument("--reps", type=int, default=50, help="timed repetitions per kernel and baseline")
    bn.add_argument("--tolerance", default="float64", choices=["float64", "kernelbench"],
                     help="correctness rule: float64 (error vs a float64 truth within a multiple of eager's own; "
                          "default) or kernelbench (KernelBench's allclose vs eager, 5 trials)")
    bn.add_argument("--ray", nargs="?", const="local", default=None, metavar="ADDRESS",
                    help="fan tasks out over a Ray cluster (ADDRESS, e.g. ray://head:10001; none: a local Ray)")
    bn.add_argument("--no-profile", action="store_true",
                    help="do not profile each stage's best kernel with Nsight Compute (ncu)")
    bn.add_argument("--no-compile", action="store_true",
                    help="time eager only, not torch.compile (a coverage run: inductor's compile is most of a small "
                         "task's time); results then have no x compile column")
    bn.add_argument("--compile-mode", default="default", choices=("default", "reduce-overhead", "max-autotune"),
                    help="torch.compile's mode for the baseline (reduce-overhead: with CUDA graphs, the fair "
                         "comparison for programs the expert replays as one; default: %(default)s)")
    _add_llm_args(bn)
    bn.set_defaults(fn=cmd_bench)
    w = sub.add_parser("hw", help="show the hardware profile of the live GPU (or a named one)")
    w.add_argument("--profile", default=None)
    w.set_defaults(fn=cmd_hw)
    return p


FLAGS = {"timing_reps": "reps", "max_retries": "llm-retries", "temperature": "llm-temperature",
         "max_tokens": "llm-max-tokens", "timeout_s": "llm-timeout"}


def _flag_error(exc) -> str:
    """A pydantic ValidationError as one line: '--total-candidates must be at least 1'."""
    e = exc.errors()[0]
    field = str(e["loc"][-1]) if e["loc"] else "value"
    flag = "--" + FLAGS.get(field, field).replace("_", "-")
    if e["type"] in ("greater_than_equal", "greater_than") and "ge" in e.get("ctx", {}):
        return f"{flag} must be at least {e['ctx']['ge']}"
    return f"{flag}: {e['msg']}"


def main(argv: list[str] | None = None) -> int:
    from pydantic import ValidationError

    from graph.errors import CheckpointError, ThreadBusyError, UnknownThreadError
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except BrokenPipeError:  # `egg history T | head -1`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ValidationError as exc:  # the settings models validate; the CLI only names the flag
        print(f"egg: error: {_flag_error(exc)}", file=sys.stderr)
        return 2
    except (TaskError, UnknownProfileError, UnknownAgentError, UnknownThreadError, FileNotFoundError,
            ValueError, CliError, CheckpointError, ThreadBusyError) as exc:
        print(f"egg: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of ours: one line, the traceback on request
        if os.environ.get("EGG_DEBUG"):
            raise
        print(f"egg: internal error: {type(exc).__name__}: {exc} (set EGG_DEBUG=1 for the traceback)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("egg: interrupted; the run is checkpointed (egg runs / egg resume THREAD)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
