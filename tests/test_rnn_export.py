"""nn.LSTM / nn.GRU / nn.RNN exported as one opaque op each (agents/expert/rnn_export.py): the op graph is the same
as torch.export's own trace gives, without tracing every time step (level 3 task 42: 101 s -> 0.1 s on this
machine); the custom ops compute what aten's do."""
import pytest
import torch

import agents.expert.opgraph as og
from tasks import load_task

RNN = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.{cls}(6, 5, num_layers=2, batch_first={bf}, bidirectional={bi}{extra})
    def forward(self, x, h0{c0_arg}):
        out, h = self.rnn(x, {state})
        return {ret}
def get_inputs():
    return [torch.randn(3, 40, 6), torch.randn({dirs} * 2, {B}, 5){c0}]
def get_init_inputs():
    return []
"""


def _task(tmp, cls, bf, bi, extra=""):
    lstm = cls == "LSTM"
    dirs, B = (2 if bi else 1), (3 if bf else 40)
    src = RNN.format(cls=cls, bf=bf, bi=bi, extra=extra, dirs=dirs, B=B, c0_arg=", c0" if lstm else "",
                     state="(h0, c0)" if lstm else "h0", ret="(out * 2.0).sum() + h[1].sum()" if lstm else "(out * 2.0).sum() + h.sum()",
                     c0=f", torch.randn({dirs} * 2, {B}, 5)" if lstm else "")
    p = tmp / f"{cls}_{bf}_{bi}.py"
    p.write_text(src)
    return load_task(p)


@pytest.mark.parametrize("cls,bf,bi,extra", [("LSTM", True, False, ""), ("LSTM", False, True, ""),
                                             ("GRU", True, True, ""), ("RNN", False, False, ", nonlinearity='relu'"),
                                             ("RNN", True, True, ", bias=False")])
def test_the_opaque_export_gives_the_same_op_graph(tmp_egg, cls, bf, bi, extra, monkeypatch):
    task = _task(tmp_egg, cls, bf, bi, extra)
    opaque = og.export_graph(task).structure()
    monkeypatch.setattr(og, "_export", lambda model, inputs: torch.export.export(model, inputs))
    assert og.export_graph(task).structure() == opaque


def test_the_custom_ops_compute_what_aten_does():
    from agents.expert import rnn_export
    torch.manual_seed(0)
    lstm, gru = torch.nn.LSTM(4, 3, 2, batch_first=True), torch.nn.GRU(4, 3, 1, bidirectional=True)
    x, h = torch.randn(2, 7, 4), (torch.randn(2, 2, 3), torch.randn(2, 2, 3))
    with torch.no_grad():
        want_l, want_g = lstm(x, h), gru(x.transpose(0, 1))
        with rnn_export.opaque_recurrences():
            got_l, got_g = lstm(x, h), gru(x.transpose(0, 1))
    torch.testing.assert_close(got_l, want_l)
    torch.testing.assert_close(got_g, want_g)
    from torch.nn.modules import rnn
    assert not isinstance(rnn._VF, rnn_export._VF)  # the patch ends with the block
