"""Make a bench folder of chosen KernelBench tasks for `benchmarks/kb_device.sh` (BENCH_PATHS=.kbr/NAME).

    python benchmarks/kbr.py NAME level1:35,36,41-46 level2:6,13      # tasks by level and number
    python benchmarks/kbr.py NAME --like benchmarks/kernelbench_...json  # the tasks an earlier run measured

Copies from KernelBench's levels (--kb, default .kb, else ../shared/kernelbench) into .kbr/NAME/levelN/, so
task keys keep their level (level2/6_Conv3d_...) and `egg bench --compare` pairs them with earlier runs.
The folder is replaced, not merged: a rerun with other tasks leaves no stale ones behind."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def numbers(spec: str) -> list[int]:
    """'35,36,41-46' -> [35, 36, 41, 42, 43, 44, 45, 46]."""
    out = []
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def pick(kb: Path, specs: list[str]) -> list[Path]:
    """The task files that `level:numbers` specs name; an unknown level or number is an error."""
    files = []
    for spec in specs:
        level, _, nums = spec.partition(":")
        folder = kb / level
        if not folder.is_dir() or not nums:
            raise SystemExit(f"kbr: {spec!r}: expected LEVEL:NUMBERS with {folder} a folder of tasks")
        by_number = {int(p.name.split("_", 1)[0]): p for p in folder.glob("*.py") if p.name.split("_", 1)[0].isdigit()}
        missing = [n for n in numbers(nums) if n not in by_number]
        if missing:
            raise SystemExit(f"kbr: no task numbered {missing} in {folder}")
        files += [by_number[n] for n in numbers(nums)]
    return files


def like(kb: Path, results: Path) -> list[Path]:
    """The tasks an earlier results.json measured (keys level/name), found in `kb`."""
    tasks = [r["task"] for r in json.loads(results.read_text())["results"]]
    files = [kb / f"{t}.py" for t in tasks]
    if missing := [str(f) for f in files if not f.exists()]:
        raise SystemExit(f"kbr: not in {kb}: {', '.join(missing[:5])}")
    return files


def make(name: str, files: list[Path], dest_root: Path) -> Path:
    dest = dest_root / name
    shutil.rmtree(dest, ignore_errors=True)
    for f in files:
        (dest / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(f, dest / f.parent.name / f.name)
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("specs", nargs="*", help="LEVEL:NUMBERS, e.g. level1:35,36,41-46")
    ap.add_argument("--like", type=Path, help="an earlier results.json: the same tasks")
    ap.add_argument("--kb", type=Path, help="KernelBench's levels (default .kb, else ../shared/kernelbench)")
    ap.add_argument("--dest", type=Path, default=ROOT / ".kbr")
    a = ap.parse_args(argv)
    kb = a.kb or next((p for p in (ROOT / ".kb", ROOT.parent / "shared" / "kernelbench") if p.is_dir()), ROOT / ".kb")
    if not a.specs and not a.like:
        ap.error("name tasks (LEVEL:NUMBERS) or --like RESULTS.json")
    files = pick(kb, a.specs) + (like(kb, a.like) if a.like else [])
    dest = make(a.name, list(dict.fromkeys(files)), a.dest)
    print(f"{len(set(files))} task(s) in {dest}: BENCH_NAME={a.name} BENCH_PATHS={dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
