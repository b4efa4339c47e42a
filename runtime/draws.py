"""Random numbers a reference draws inside its forward (level 3 task 35 draws its LSTM's initial state with
`torch.randn` when none is given). No kernel can match eager's generator, and a float64 rerun cannot redraw the same
numbers, so the verifier records the reference's own draws as it runs (`Record`), replays them to the float64 truth
widened (`Replay`), and hands the same tensors to the candidate, whose host code asks for each draw through
`egg.draw` (runtime.kernel_api): the candidate computes everything after the numbers, never the numbers' choice.
Outside the verifier's trials (timing, an exported module) `egg.draw` draws afresh, as eager does."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from state import DRAW_OPS, MASK_OPS  # what opgraph lowers as a drawn leaf; any other random op stays declined


class DrawMismatch(RuntimeError):
    """A replayed call asked for another draw than the one recorded at its place."""


@dataclass
class Draw:
    op: str  # "randn" or "rand" (the `_like` forms are recorded as their plain op)
    tensor: torch.Tensor

    def matches(self, op: str, shape) -> bool:
        return self.op == op.removesuffix("_like") and tuple(self.tensor.shape) == tuple(shape)


def _op(func) -> str | None:
    name = func.overloadpacket.__name__
    if name in DRAW_OPS:
        return name
    return "dropout" if name.rstrip("_") in MASK_OPS else None  # a keep mask (native_dropout's, bernoulli_'s)


def _mask(out) -> torch.Tensor:
    """A recorded keep mask, as bool: native_dropout's second output, or bernoulli's 0/1 values."""
    return (out[1] if isinstance(out, tuple) else out).detach().bool()


class Record(TorchDispatchMode):
    """Runs the code as it is and keeps a copy of every draw (in order): `draws`."""

    def __init__(self):
        super().__init__()
        self.draws: list[Draw] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (op := _op(func)) == "dropout":
            self.draws.append(Draw(op, _mask(out)))
        elif op is not None:
            self.draws.append(Draw(op.removesuffix("_like"), out.detach().clone()))
        return out


class Replay(TorchDispatchMode):
    """Each draw answered, in order, with the recorded one (as `dtype` where given: the float64 truth's), on the
    device the call asked for; a draw of another kind or shape, or one more than recorded, raises DrawMismatch."""

    def __init__(self, draws: list[Draw], dtype: torch.dtype | None = None):
        super().__init__()
        self.draws, self.dtype, self.at = draws, dtype, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        op = _op(func)
        if op is None:
            return func(*args, **(kwargs or {}))
        if op == "dropout":  # the recorded keep mask in place of a fresh one
            x = args[0]
            keep = take(self, op, x.shape, self.dtype or x.dtype, x.device)
            if func.overloadpacket.__name__ == "native_dropout":  # (x * mask / (1 - p), the mask), as eager's kernel
                p = float(args[1] if len(args) > 1 else kwargs["p"])
                return x * keep * (1.0 / (1.0 - p)), keep.bool()
            if func.overloadpacket.__name__.endswith("_"):  # bernoulli_(1 - p) on the tensor it fills
                return x.copy_(keep)
            return keep
        fresh = func(*args, **(kwargs or {}))  # for its shape, dtype and device only
        return take(self, op, fresh.shape, self.dtype or fresh.dtype, fresh.device)


class Queue:
    """The draws one call is to see, in order: for `egg.draw` (KernelAPI.replay) during a verifier's trial."""

    def __init__(self, draws: list[Draw]):
        self.draws, self.at = draws, 0

    def take(self, op: str, shape, dtype: torch.dtype, device) -> torch.Tensor:
        return take(self, op, shape, dtype, device)

    def used_all(self) -> bool:
        return self.at == len(self.draws)


def take(queue, op: str, shape, dtype: torch.dtype, device) -> torch.Tensor:
    """The next recorded draw of `queue` (an object with `draws` and `at`) as asked, or DrawMismatch."""
    if queue.at >= len(queue.draws):
        raise DrawMismatch(f"a draw of {op} {tuple(shape)} past the {len(queue.draws)} the reference made")
    d = queue.draws[queue.at]
    if not d.matches(op, shape):
        raise DrawMismatch(f"draw {queue.at} asked as {op} {tuple(shape)}, recorded as {d.op} {tuple(d.tensor.shape)}")
    queue.at += 1
    return d.tensor.to(device=device, dtype=dtype, copy=True)
