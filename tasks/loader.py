"""Load a KernelBench-format task file and report a broken one with one clear error."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from state import TaskSpec

SUITE_DIR = Path(__file__).parent / "suite"


class TaskError(ValueError):
    """A task file that cannot be used; the message is one line for the user."""


@dataclass
class LoadedTask:
    path: Path
    module: types.ModuleType

    @property
    def name(self) -> str:
        return self.path.stem

    def make_model(self, seed: int = 42):
        """The reference model, built after seeding so a ModelNew built the same way matches its weights."""
        import torch
        torch.manual_seed(seed)
        return self.module.Model(*self.module.get_init_inputs())

    def make_inputs(self, seed: int, device: str | None = None) -> list:
        """Fresh inputs; `device` makes get_inputs() allocate there directly ("meta": shapes only,
        "cuda": no multi-GB CPU round trip). Tensors it returns elsewhere are moved."""
        import torch
        torch.manual_seed(seed)
        if device is None:
            return list(self.module.get_inputs())
        if device == "cuda":
            torch.cuda.manual_seed(seed)
        with torch.device(device):
            xs = list(self.module.get_inputs())
        return [x.to(device) if isinstance(x, torch.Tensor) and x.device.type != torch.device(device).type else x
                for x in xs]

    def init_inputs(self) -> list:
        return list(self.module.get_init_inputs())


def _import(path: Path) -> types.ModuleType:
    name = f"egg_task_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"{path}: not a Python file")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses and pickling look modules up here
    try:
        spec.loader.exec_module(mod)
    except SyntaxError as exc:
        raise TaskError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except Exception as exc:
        raise TaskError(f"{path}: importing it raised {type(exc).__name__}: {exc}") from None
    return mod


def load_task(path: str | Path, check_inputs: bool = True) -> LoadedTask:
    import torch

    p = Path(path)
    if not p.exists():
        raise TaskError(f"{p}: no such task file")
    if p.is_dir() or p.suffix != ".py":
        raise TaskError(f"{p}: a task is a .py file in the KernelBench format")
    mod = _import(p.resolve())
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(mod, n)]
    if missing:
        raise TaskError(f"{p}: missing {', '.join(missing)} (a task defines class Model, get_inputs() and get_init_inputs())")
    if not (isinstance(mod.Model, type) and issubclass(mod.Model, torch.nn.Module)):
        raise TaskError(f"{p}: Model must be a torch.nn.Module subclass")
    task = LoadedTask(p.resolve(), mod)
    if check_inputs:
        for fn in ("get_inputs", "get_init_inputs"):
            try:
                with torch.device("meta"):  # shapes and types only: no multi-GB allocation here
                    val = getattr(mod, fn)()
            except Exception as exc:
                raise TaskError(f"{p}: {fn}() raised {type(exc).__name__}: {exc}") from None
            if not isinstance(val, (list, tuple)):
                raise TaskError(f"{p}: {fn}() must return a list, got {type(val).__name__}")
            if fn == "get_inputs" and not all(isinstance(v, (torch.Tensor, int, float, bool)) for v in val):
                raise TaskError(f"{p}: get_inputs() must return tensors or Python scalars")
            if fn == "get_inputs" and not any(isinstance(v, torch.Tensor) for v in val):
                raise TaskError(f"{p}: get_inputs() returned no tensor")
    return task


def task_spec(task: LoadedTask) -> TaskSpec:
    data = task.path.read_bytes()
    return TaskSpec(path=str(task.path), name=task.name, source_sha256=hashlib.sha256(data).hexdigest(),
                    source=data.decode("utf-8", errors="replace"))


def file_sha256(path: str | Path) -> str | None:
    p = Path(path)
    return hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else None


def materialize(spec: TaskSpec) -> str:
    """A file holding exactly the task source the run stored (written once, named by its hash): what
    the agents and the evaluation worker load, so an edit of the user's file mid-run changes nothing."""
    if not spec.source:  # a run recorded before sources were stored: the user's file it is
        return spec.path
    root = Path(os.environ.get("EGG_CACHE_DIR") or Path.home() / ".cache" / "egg") / "tasks" / spec.source_sha256[:16]
    p = root / f"{spec.name}.py"
    if not p.is_file() or file_sha256(p) != spec.source_sha256:
        root.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(spec.source.encode("utf-8"))
        tmp.replace(p)
    return str(p)


def find_task_files(paths: list[str | Path]) -> list[Path]:
    """Every task file under the given files or folders, sorted, deduplicated."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*.py") if not q.name.startswith("_"))
        elif p.exists():
            out.append(p)
        else:
            raise TaskError(f"{p}: no such file or folder")
    seen, uniq = set(), []
    for q in out:
        r = q.resolve()
        if r not in seen:
            seen.add(r)
            uniq.append(r)
    return uniq


def tensor_attribute(model, fqn: str):
    """The plain tensor attribute `fqn` ("h0", "block.h0") of a module, or None: state the model keeps
    outside its parameters and buffers (an RNN's initial state drawn at init), which torch.export
    lifts as a constant."""
    import torch
    obj = model
    for part in fqn.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj if isinstance(obj, torch.Tensor) and not isinstance(obj, torch.nn.Parameter) else None
