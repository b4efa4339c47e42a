"""nn.LSTM / nn.GRU / nn.RNN as one opaque op each while torch.export traces a reference.

aten::lstm (and gru, rnn_tanh, rnn_relu) stays one node of the exported graph, but to know its outputs' shapes
export runs its composite implementation on fake tensors: every time step of every layer, traced and thrown away
(level 3 task 37, 6 layers over 512 steps: 18 s of its 20 s to plan; task 40, 125 of 135 s). Here, for the
duration of the export only, nn.RNNBase's call into `_VF` goes to custom ops `egg::lstm` ... with the same
arguments, whose fake implementation gives the shapes directly; `opgraph` lowers them as it lowers aten's (the
name without the namespace). Their real implementation is aten's own, so the exported program still runs."""
from __future__ import annotations

import contextlib
import threading

import torch
from torch import Tensor
from torch.nn.modules import rnn as _rnn

_LOCK = threading.Lock()  # the patch is process-wide: one export at a time under it


def _out_shape(x: Tensor, h: Tensor, bidirectional: bool) -> tuple[int, ...]:
    return (*x.shape[:-1], (2 if bidirectional else 1) * h.shape[-1])


@torch.library.custom_op("egg::lstm", mutates_args=())
def lstm(x: Tensor, hx: list[Tensor], params: list[Tensor], has_biases: bool, num_layers: int, dropout: float,
         train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor, Tensor]:
    out = torch.ops.aten.lstm.input(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first)
    return tuple(t.clone() for t in out)


@lstm.register_fake
def _(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    return x.new_empty(_out_shape(x, hx[0], bidirectional)), hx[0].new_empty(hx[0].shape), hx[1].new_empty(hx[1].shape)


def _single_state(name: str):
    @torch.library.custom_op(f"egg::{name}", mutates_args=())
    def op(x: Tensor, hx: Tensor, params: list[Tensor], has_biases: bool, num_layers: int, dropout: float,
           train: bool, bidirectional: bool, batch_first: bool) -> tuple[Tensor, Tensor]:
        out = getattr(torch.ops.aten, name).input(x, hx, params, has_biases, num_layers, dropout, train, bidirectional,
                                                  batch_first)
        return tuple(t.clone() for t in out)

    @op.register_fake
    def _(x, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        return x.new_empty(_out_shape(x, hx, bidirectional)), hx.new_empty(hx.shape)
    return op


OPS = {"lstm": lstm, "gru": _single_state("gru"), "rnn_tanh": _single_state("rnn_tanh"), "rnn_relu": _single_state("rnn_relu")}


class _VF:
    """`torch._VF` with its recurrent ops' dense form (input, hx, params, 6 flags) sent to the custom ops; the
    packed-sequence form and everything else to the real one."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        real = getattr(self._real, name)
        if name not in OPS:
            return real

        def call(*args, **kwargs):
            if len(args) == 9 and not kwargs and isinstance(args[0], Tensor) and isinstance(args[3], bool):
                return OPS[name](*args)
            return real(*args, **kwargs)
        return call


@contextlib.contextmanager
def opaque_recurrences():
    """Within: nn.LSTM, nn.GRU and nn.RNN call the custom ops (torch.export sees one node each, traced in constant
    time)."""
    with _LOCK:
        real = _rnn._VF
        _rnn._VF = _VF(real)
        try:
            yield
        finally:
            _rnn._VF = real
