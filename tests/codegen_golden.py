"""Hashes of everything the expert generates for the bundled suite and KernelBench levels 1-2:
for each task, every stage's candidates (each tuning stage starting from the first candidate of
the stage before). A refactor of the agent or its templates must leave them byte-identical;
an intended change regenerates the file (`python -m tests.codegen_golden`) and says why."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "codegen_hashes.json"
KB = ROOT.parent / "shared" / "kernelbench"


def task_paths() -> list[Path]:
    from tasks import find_task_files
    roots = [ROOT / "tasks" / "suite"] + [KB / lv for lv in ("level1", "level2") if (KB / lv).exists()]
    return find_task_files(roots)


def key(p: Path) -> str:
    return f"{p.parent.parent.name}/{p.parent.name}/{p.stem}" if p.is_relative_to(ROOT / "tasks") else f"kernelbench/{p.parent.name}/{p.stem}"


def hashes() -> dict[str, str]:
    from agents.expert import ExpertAgent
    from tests.support import stage_kernels
    agent, out = ExpertAgent(), {}
    for p in task_paths():
        why = agent.precheck(str(p))
        if why:
            out[key(p)] = "unsupported: " + why
            continue
        h = hashlib.sha256()
        for k in stage_kernels(agent, p, max_candidates=100):
            h.update(k.cuda_source.encode() + b"\0" + k.host_code.encode() + b"\0" + json.dumps(k.params, sort_keys=True).encode())
        out[key(p)] = h.hexdigest()
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    GOLDEN.write_text(json.dumps(hashes(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
