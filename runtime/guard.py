"""Record the aten ops a candidate's forward calls, and judge them by policy.

strict: only allocation, view, copy and metadata ops may appear.
mixed:  torch library compute ops are allowed (listed in the evaluation), but the
        candidate must launch a kernel of its own, and its ops may not already
        cover every compute op of the reference (that is the reference again).
"""
from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode

ALLOC = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided", "zeros", "zeros_like",
         "full", "full_like", "ones", "ones_like", "scalar_tensor", "lift_fresh", "fill", "zero"}
VIEW = {"view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand", "unsqueeze",
        "squeeze", "slice", "select", "alias", "detach", "narrow", "split", "split_with_sizes", "unbind",
        "chunk", "flatten", "unflatten", "view_as", "expand_as", "_reshape_alias", "unfold", "diagonal",
        "movedim", "swapaxes", "contiguous", "resolve_conj", "resolve_neg"}
COPY = {"clone", "copy", "_copy_from", "_to_copy", "_copy_from_and_resize"}
META = {"size", "stride", "sym_size", "sym_stride", "sym_numel", "is_contiguous", "dim", "numel",
        "storage_offset", "sym_storage_offset", "_local_scalar_dense", "is_same_size", "record_stream"}
POLICIES = ("strict", "mixed")


def base_name(op_name: str) -> str:
    """'aten::copy_.default' / 'aten.add.Tensor' -> 'copy' / 'add'."""
    name = op_name.split("::")[-1].split(".")
    name = name[1] if name[0] == "aten" and len(name) > 1 else name[0]
    return name.rstrip("_") if name not in ("_", "__") else name


def classify(op_name: str) -> str:
    b = base_name(op_name)
    for kind, names in (("alloc", ALLOC), ("view", VIEW), ("copy", COPY), ("meta", META)):
        if b in names:
            return kind
    return "compute"


class OpRecorder(TorchDispatchMode):
    """Records every aten op dispatched while active (nested calls included)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.name()) if hasattr(func, "name") else str(func)
        if base_name(name) == "_to_copy" and kwargs and kwargs.get("dtype") is not None:
            src = args[0] if args else None
            if getattr(src, "dtype", None) is not None and src.dtype != kwargs["dtype"]:
                name = "aten::_to_copy(dtype conversion)"  # a conversion computes: not a plain copy
        self.ops.append(name)
        return func(*args, **(kwargs or {}))


def compute_ops(ops: list[str]) -> list[str]:
    seen: list[str] = []
    for o in ops:
        if (o.endswith("(dtype conversion)") or classify(o) == "compute") and o not in seen:
            seen.append(o)
    return seen


def judge(policy: str, ops: list[str], own_launches: int, reference_compute: list[str] | None = None) -> str:
    """Return '' when the ops are allowed under the policy, else the reason for rejection."""
    if policy not in POLICIES:
        raise ValueError(f"unknown guard policy {policy!r}")
    comp = compute_ops(ops)
    if own_launches == 0:
        return "launched no kernel of its own"
    if policy == "strict":
        return f"computes with torch inside forward: {', '.join(comp)}" if comp else ""
    ref = {base_name(o) for o in (reference_compute or [])}
    if ref and ref <= {base_name(o) for o in comp}:
        return "its torch ops already compute everything the reference does (it is the reference again)"
    return ""
