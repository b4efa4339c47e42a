"""Which tasks the expert agent covers, on the CPU (no GPU, nothing timed): each task file under the
given folders is exported and planned, and the line says OK with its kernel count and planning time, or
why not. A user's own KernelBench checkout works the same, e.g. its level 3:

    python benchmarks/coverage.py ../shared/kernelbench/level1 ../shared/kernelbench/level2
    python benchmarks/coverage.py PATH/TO/KernelBench/level3 --json level3_coverage.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _key(p: Path):
    head = p.stem.split("_")[0]
    return (str(p.parent), int(head) if head.isdigit() else 1 << 30, p.name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="+", type=Path)
    ap.add_argument("--json", type=Path, help="write {task: {ok, kernels, seconds, why}} here")
    args = ap.parse_args(argv)
    from agents.expert import ExpertAgent
    files = sorted((f for d in args.folders for f in (d.rglob("*.py") if d.is_dir() else [d])
                    if not f.name.startswith("_")), key=_key)
    if not files:
        ap.error("no task files under " + ", ".join(map(str, args.folders)))
    agent, out = ExpertAgent(), {}
    for f in files:
        t = time.monotonic()
        why = agent.precheck(str(f))
        kernels = None
        if why is None:
            _, fam, plan = agent._plan(str(f))
            kernels = len(plan.stages()) if fam == "program" else 1
        out[str(f)] = {"ok": why is None, "kernels": kernels, "seconds": round(time.monotonic() - t, 2), "why": why}
        r = out[str(f)]
        print(f"{f.name:48s} {r['seconds']:6.1f}s  " + (f"OK, {kernels} kernel(s)" if why is None else why[:160]), flush=True)
    ok = sum(r["ok"] for r in out.values())
    print(f"covered {ok} of {len(out)}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
