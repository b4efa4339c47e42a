"""Random draws inside a reference's forward (runtime/draws.py): recorded as the reference runs, replayed to its float64
rerun and, through `egg.draw`, to the candidate; nothing else may take their place."""
import pytest
import torch

from runtime.draws import Draw, DrawMismatch, Queue, Record, Replay
from runtime.host_policy import PolicyError, check_host_code
from runtime.kernel_api import KernelAPI


class Drawing(torch.nn.Module):
    """Task 35's pattern: an initial state drawn when none is given, then used."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 4))

    def forward(self, x):
        h = torch.randn(x.shape[0], 4, device=x.device)
        u = torch.rand_like(h)
        return torch.tanh(x @ self.w + h) * u


def test_the_float64_rerun_sees_the_references_own_draws_widened():
    torch.manual_seed(0)
    m, x = Drawing(), torch.randn(5, 6)
    with torch.no_grad(), Record() as rec:
        got = m(x)
    assert [d.op for d in rec.draws] == ["randn", "rand"] and rec.draws[0].tensor.shape == (5, 4)
    m64 = Drawing().double()
    m64.load_state_dict(m.state_dict())
    with torch.no_grad(), Replay(rec.draws, torch.float64) as rep:
        truth = m64(x.double())
    assert rep.at == 2 and truth.dtype == torch.float64
    assert torch.allclose(got.double(), truth, atol=1e-5)
    with torch.no_grad():  # a redraw (what a rerun without the replay does) lands elsewhere
        assert not torch.allclose(m64(x.double()), truth, atol=1e-2)


def test_a_draw_of_another_shape_or_one_too_many_is_refused():
    with Record() as rec:
        torch.randn(3, 4)
    with pytest.raises(DrawMismatch, match="recorded as randn"), Replay(rec.draws):
        torch.randn(4, 3)
    with pytest.raises(DrawMismatch, match="past the 1"), Replay(rec.draws):
        torch.randn(3, 4)
        torch.rand(2)


def test_egg_draw_hands_the_recorded_numbers_in_order_and_draws_afresh_outside_a_trial():
    with Record() as rec:
        a, b = torch.randn(2, 3), torch.rand(5)
    api = KernelAPI(None)
    api.replay = Queue(rec.draws)
    assert torch.equal(api.draw("randn", (2, 3), torch.float32, "cpu"), a)
    assert not api.replay.used_all()
    assert torch.equal(api.draw("rand", (5,), torch.float32, "cpu"), b) and api.replay.used_all()
    with pytest.raises(DrawMismatch):
        api.draw("rand", (5,), torch.float32, "cpu")
    api.replay = None
    fresh = api.draw("rand", (1000,), torch.float32, "cpu")
    assert fresh.shape == (1000,) and 0.0 <= float(fresh.min()) and float(fresh.max()) < 1.0 and float(fresh.std()) > 0.2
    with pytest.raises(ValueError, match="not a draw"):
        api.draw("randint", (3,), torch.float32, "cpu")


def test_host_code_may_call_egg_draw_but_still_not_seed_the_generator():
    ok = ("import torch\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n    def forward(self, x0):\n"
          "        x9 = egg.draw('randn', (2, 3), torch.float32, x0.device)\n        return x9\n")
    check_host_code(ok, "strict")
    with pytest.raises(PolicyError):
        check_host_code(ok.replace("        x9 =", "        torch.manual_seed(0)\n        x9 ="), "strict")


def test_the_worker_records_only_where_the_reference_draws():
    """A reference without draws runs under no dispatch mode in the trials (its fast paths as eager has them); one
    whose setup run called randn is recorded."""
    from runtime.worker import Worker
    w = Worker()
    with w._record() as rec:
        torch.randn(2)
    assert rec.draws == []
    w.draws_random = True
    with w._record() as rec:
        torch.randn(2)
    assert [d.op for d in rec.draws] == ["randn"]


class Dropping(torch.nn.Module):
    """Level 2 task 66's pattern: a Dropout left in training mode between a matmul and a softmax; a channel-wise one."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(6, 4))
        self.drop, self.drop2d = torch.nn.Dropout(0.3), torch.nn.Dropout2d(0.5)

    def forward(self, x):
        y = torch.softmax(self.drop(x @ self.w), dim=1)
        return self.drop2d(y.reshape(5, 2, 2, 1))


def test_a_dropout_mask_is_recorded_and_replayed_to_the_float64_rerun():
    """A Dropout's keep mask is a draw: recorded as the reference makes it (bernoulli_ on the CPU, native_dropout's
    second output on the GPU), as 0/1 values, and replayed to the float64 rerun, which then matches; a rerun without
    the replay draws other masks. egg.draw hands a trial the recorded mask and draws a fresh one (1 - p of it kept)
    outside a trial."""
    torch.manual_seed(0)
    m, x = Dropping(), torch.randn(5, 6)
    with torch.no_grad(), Record() as rec:
        got = m(x)
    assert [(d.op, tuple(d.tensor.shape), d.tensor.dtype) for d in rec.draws] == \
        [("dropout", (5, 4), torch.bool), ("dropout", (5, 2, 1, 1), torch.bool)]
    m64 = Dropping().double()
    m64.load_state_dict(m.state_dict())
    with torch.no_grad(), Replay(rec.draws, torch.float64) as rep:
        truth = m64(x.double())
    assert rep.at == 2 and torch.allclose(got.double(), truth, atol=1e-6)
    with torch.no_grad():
        assert not torch.allclose(m64(x.double()), truth, atol=1e-3)
    # eager's GPU path: native_dropout, replayed as x * mask / (1 - p) with the mask as its second output
    keep = torch.tensor([[True, False], [True, True]])
    with Replay([Draw("dropout", keep)], torch.float64):
        out, mask = torch.ops.aten.native_dropout(torch.full((2, 2), 2.0, dtype=torch.float64), 0.2, True)
    assert torch.equal(mask, keep) and torch.allclose(out, keep.double() * 2.5)
    api = KernelAPI(None)
    api.replay = Queue(list(rec.draws))
    assert torch.equal(api.draw("dropout", (5, 4), torch.float32, "cpu", 0.3), rec.draws[0].tensor.float())
    api.replay = None
    fresh = api.draw("dropout", (400, 100), torch.float32, "cpu", 0.25)
    assert set(fresh.unique().tolist()) == {0.0, 1.0} and abs(fresh.mean().item() - 0.75) < 0.02
