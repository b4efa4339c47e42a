"""What a candidate's host code may say, checked on its source before it runs, and what it must
leave untouched, checked after it ran.

Host code is Python that builds `ModelNew` and launches the candidate's kernels through `egg`.
It runs in the verifier's process, so everything it could reach is a way to pass or time falsely:
the verifier's frames and globals, the timer, torch's dispatch switches, the reference. The
policy is a whitelist of shapes, not a list of known cheats:

- imports: `math`, `torch`, `torch.nn`, `numpy` (mixed adds `torch.nn.functional`);
- no name or attribute that starts with `_` (dunders, `_C`, `_version`, `_getframe`, ...);
- no builtins that reach objects by name or run code (`getattr`, `eval`, `globals`, `id`, ...);
- no attribute of torch that switches behaviour or timing (`cuda`, `backends`, `ops`, `set_*`,
  streams, events, dlpack, hooks, compile);
- of `egg`, only `empty`, `empty_like`, `launch`, `graphed` (launches replayed as a CUDA graph), `staged` (launches
  reading only the module's weights, run again when those change), `tmap` (a TMA
  descriptor of a tensor, encoded by the driver) and `draw` (a random draw the reference makes in its forward: in
  the verifier's trials the reference's own numbers, runtime/draws.py);
- attributes are assigned on `self` only; classes derive from `nn.Module` only (no Tensor subclass);
- no `global` or `nonlocal`.
"""
from __future__ import annotations

import ast

IMPORTS = {"strict": {"math", "torch", "torch.nn", "numpy"},
           "mixed": {"math", "torch", "torch.nn", "numpy", "torch.nn.functional"}}
BANNED_CALLS = {"__import__", "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr",
                "delattr", "breakpoint", "input", "id", "hash", "type", "memoryview", "object", "classmethod",
                "staticmethod", "property", "help", "exit", "quit", "dir"}
BANNED_ATTRS = {
    # the verifier's handle on the candidate
    "poison", "launches", "module", "skip", "kernel", "replay", "drawn",
    # timing, streams, devices, dispatch, library back doors
    "cuda", "backends", "ops", "library", "utils", "compile", "jit", "fx", "export", "autograd", "overrides",
    "Event", "Stream", "stream", "synchronize", "elapsed_time", "record", "wait_stream", "from_dlpack",
    "to_dlpack", "cuda_stream", "register_forward_hook", "register_forward_pre_hook", "register_hook",
    "set_", "data", "storage", "untyped_storage", "manual_seed", "seed", "initial_seed", "random",
    "ctypes", "ctypeslib", "sys", "os", "subprocess", "threading", "multiprocessing", "inspect", "gc",
    "weakref", "builtins", "importlib",
    # frames and code objects
    "gi_frame", "f_back", "f_locals", "f_globals", "tb_frame", "cr_frame", "ag_frame", "gi_code", "f_code",
    "tb_next", "func_globals",
}
EGG_API = {"empty", "empty_like", "launch", "graphed", "staged", "tmap", "draw"}


class PolicyError(ValueError):
    """The host code breaks the policy; the message names the line and what it did."""


def _where(node: ast.AST) -> str:
    return f"line {getattr(node, 'lineno', '?')}"


def check_host_code(src: str, policy: str) -> None:
    """Raise PolicyError when `src` may not run under `policy` ("strict" or "mixed")."""
    if policy not in IMPORTS:
        raise ValueError(f"unknown guard policy {policy!r}")
    try:
        tree = ast.parse(src)
    except SyntaxError as exc:
        raise PolicyError(f"host code line {exc.lineno}: syntax error: {exc.msg}") from None
    allowed = IMPORTS[policy]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name not in allowed:
                    raise PolicyError(f"host code {_where(node)}: imports {a.name} (allowed: {', '.join(sorted(allowed))})")
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level or mod not in allowed:
                raise PolicyError(f"host code {_where(node)}: imports from {mod or '.'}")
            for a in node.names:
                if a.name.startswith("_") or a.name in BANNED_ATTRS or a.name == "*":
                    raise PolicyError(f"host code {_where(node)}: imports {a.name} from {mod}")
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            raise PolicyError(f"host code {_where(node)}: global/nonlocal state")
        elif isinstance(node, ast.Name):
            if node.id.startswith("_") or node.id in BANNED_CALLS:
                raise PolicyError(f"host code {_where(node)}: uses {node.id}")
        elif isinstance(node, ast.Attribute):
            if node.attr == "__init__" and isinstance(node.value, ast.Call) and ast.unparse(node.value) == "super()":
                continue  # super().__init__(): the one dunder every nn.Module needs
            if node.attr.startswith("_"):
                raise PolicyError(f"host code {_where(node)}: reaches private attribute .{node.attr}")
            if node.attr in BANNED_ATTRS or node.attr.startswith("set_"):
                raise PolicyError(f"host code {_where(node)}: uses .{node.attr}")
            if isinstance(node.value, ast.Name) and node.value.id == "egg" and node.attr not in EGG_API:
                raise PolicyError(f"host code {_where(node)}: egg.{node.attr} (egg offers {', '.join(sorted(EGG_API))})")
            if isinstance(node.ctx, (ast.Store, ast.Del)) and not (
                    isinstance(node.value, ast.Name) and node.value.id == "self"):
                raise PolicyError(f"host code {_where(node)}: assigns .{node.attr} on something other than self")
        elif isinstance(node, ast.ClassDef):
            bases = [ast.unparse(b) for b in node.bases]
            if not bases or any(b not in ("nn.Module", "torch.nn.Module") for b in bases) or node.keywords:
                raise PolicyError(f"host code {_where(node)}: class {node.name}({', '.join(bases)}) "
                                  "(classes derive from nn.Module only)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "hasattr":
            if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_"):
                raise PolicyError(f"host code {_where(node)}: hasattr on a private attribute")


def _watched():
    """The objects the verifier's own correctness and timing stand on."""
    import numpy as np
    import torch

    from runtime import correctness, timing
    out = {
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.current_stream": torch.cuda.current_stream,
        "torch.nn.Module.__call__": torch.nn.Module.__call__,
        "torch.Tensor.__torch_function__": torch.Tensor.__torch_function__,
        "torch.allclose": torch.allclose, "torch.isfinite": torch.isfinite, "torch.where": torch.where,
        "np.uint64": np.uint64,
    }
    for name in ("elapsed_time", "record", "synchronize", "__init__"):
        out[f"torch.cuda.Event.{name}"] = getattr(torch.cuda.Event, name)
    for mod in (correctness, timing):
        for k, v in vars(mod).items():
            if callable(v) and not k.startswith("__"):
                out[f"{mod.__name__}.{k}"] = v
        for k, v in vars(mod).items():
            if isinstance(v, (int, float, dict)) and k.isupper():
                out[f"{mod.__name__}.{k}"] = repr(v)
    return out


class Snapshot:
    """Identities (and constants) of what the verifier relies on, taken before host code runs."""

    def __init__(self):
        self.before = _watched()

    def changed(self) -> list[str]:
        now = _watched()
        return [k for k, v in self.before.items() if now.get(k) is not v and now.get(k) != v]
