"""The float64 rule's NaN trial (runtime/nan_trial.py) on the CPU: where the NaN go in, which output elements must
come out NaN (eager's NaN that depend on them), and the verdicts on torch functions standing in for kernels."""
import torch

from runtime import nan_trial as nt


def _trial(fn, cand, inputs, seed=11):
    """The worker's steps with `fn` as eager and `cand` as the candidate."""
    places = nt.nan_places([x.clone() for x in inputs], seed)
    a, b = (fn(*nt.put([x.clone() for x in inputs], places, v)) for v in nt.PROBE_VALUES)
    dep = [nt.depends_of(a, b)]
    xs = nt.put([x.clone() for x in inputs], places, float("nan"))
    return nt.judge([cand(*xs)], [nt.eager_view(fn(*xs))], dep), places


def test_places_avoid_zeros_and_leave_integer_inputs_alone():
    x = torch.randn(64, 1000)
    x[:, ::2] = 0  # the task's zero pattern
    ints = torch.arange(10)
    places = nt.nan_places([x, ints, torch.zeros(5), 3.0], seed=1)
    assert places[1] is None and places[2] is None and places[3] is None
    idx = places[0]
    assert 1 <= idx.numel() <= nt.NAN_PLACES and bool((x.reshape(-1)[idx] != 0).all())
    assert torch.equal(idx, nt.nan_places([x, ints, torch.zeros(5), 3.0], seed=1)[0])  # the same draw again
    y = nt.put([x.clone()], [idx], float("nan"))[0]
    assert int(torch.isnan(y).sum()) == idx.numel() and torch.equal(torch.nan_to_num(y, 0.0) == 0, torch.isnan(y) | (x == 0))
    t = x.clone().t()  # a strided input: written where its own indices say
    assert int(torch.isnan(nt.put([t], [nt.nan_places([t], 1)[0]], float("nan"))[0]).sum()) >= 1


def test_relu_through_fmaxf_fails_and_a_compare_and_select_passes():
    x = [torch.randn(256, 300)]
    why, _ = _trial(torch.relu, lambda v: torch.clamp_min(torch.nan_to_num(v, nan=0.0), 0.0), x)  # fmaxf(NaN, 0) = 0
    assert "finite where eager gives NaN" in why
    why, _ = _trial(torch.relu, lambda v: torch.where(v < 0, torch.zeros_like(v), v), x)
    assert why == ""


def test_a_row_max_that_drops_nan_fails():
    x = [torch.randn(64, 512)]
    why, _ = _trial(lambda v: torch.amax(v, dim=1), lambda v: torch.amax(torch.nan_to_num(v, nan=-1e30), dim=1), x)
    assert "finite where eager gives NaN" in why
    why, _ = _trial(lambda v: torch.softmax(v, 1), lambda v: torch.softmax(v, 1), x)
    assert why == ""


def test_an_argmax_that_skips_nan_fails():
    """torch's argmax of a row with a NaN is the first NaN's index; one that compares with `>` skips it."""
    x = [torch.randn(64, 700)]
    why, _ = _trial(lambda v: torch.argmax(v, dim=1), lambda v: torch.argmax(torch.nan_to_num(v, nan=-1e30), dim=1), x)
    assert "differ from eager's on NaN inputs" in why
    why, _ = _trial(lambda v: torch.argmin(v, dim=1), lambda v: torch.argmin(v, dim=1), x)
    assert why == ""


def test_nan_only_through_zero_products_need_not_come_out():
    """diag(a) @ B as eager writes it makes a whole column NaN (0 * NaN); a row scale, the same for finite inputs, keeps
    the column finite: not a failure, nothing there depends on the NaN."""
    a, B = torch.randn(128), torch.randn(128, 96)
    why, _ = _trial(lambda u, w: torch.diag(u) @ w, lambda u, w: u[:, None] * w, [a, B])
    assert why == ""
    why, _ = _trial(lambda u, w: torch.diag(u) @ w, lambda u, w: torch.nan_to_num(u[:, None] * w), [a, B])
    assert "finite where eager gives NaN" in why  # the NaN that do depend on the input still must


def test_nan_where_eager_has_none_fails():
    x = [torch.randn(32, 100)]
    why, _ = _trial(torch.tanh, lambda v: torch.where(torch.isnan(v).any(1, keepdim=True), float("nan"), torch.tanh(v)), x)
    assert "NaN where eager's are not" in why


def test_dependence_ignores_rounding_and_sees_small_moves():
    a = torch.tensor([1.0, 1e6, 5.0, float("inf"), float("nan"), 0.0])
    b = torch.tensor([1.0 + 1e-7, 1e6 + 0.5, 7.0, float("-inf"), 2.0, 0.0])
    assert nt.depends(a, b).tolist() == [False, False, True, True, True, False]
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    m = nt.depends(x, x + 1.0, chunk=64)  # chunked the same (the scale from every chunk)
    assert m.shape == (1000,) and bool(m.all())
    assert not nt.depends(x, x * (1 + 1e-6), chunk=64).any()


def test_the_dependence_runs_use_neither_cudnn_nor_tf32_and_restore_them():
    from runtime.correctness import no_tf32
    mm, cd = torch.backends.cuda.matmul, torch.backends.cudnn
    was_mm, was_cd = mm.allow_tf32, cd.enabled
    mm.allow_tf32 = True
    try:
        with no_tf32(cudnn=False):
            assert not mm.allow_tf32 and not cd.enabled and not cd.allow_tf32
        with no_tf32():  # eager's exact-fp32 error: cuDNN kept, TF32 off
            assert not mm.allow_tf32 and cd.enabled == was_cd and not cd.allow_tf32
        assert mm.allow_tf32 and cd.enabled == was_cd
    finally:
        mm.allow_tf32 = was_mm


BN_RELU = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(16)
    def forward(self, x):
        return torch.relu(self.bn(x)) + x.amax(dim=1, keepdim=True)
def get_inputs():
    return [torch.randn(64, 16)]
def get_init_inputs():
    return []
"""


from runtime.kernel_api import KernelAPI  # noqa: E402


def _cpu_worker(tmp_path, monkeypatch):
    """The worker's NaN trial on the CPU: its task's inputs drawn there and no device to synchronize."""
    from runtime.worker import Worker
    from tasks import load_task
    p = tmp_path / "bn_relu.py"
    p.write_text(BN_RELU)
    w = Worker()
    w.task = load_task(p)
    w.ref = w.task.make_model(42)  # training mode, as the file leaves it: its running statistics move each call
    real = w.task.make_inputs
    monkeypatch.setattr(w.task, "make_inputs", lambda seed, device=None: real(seed, "cpu"))
    monkeypatch.setattr(w, "_sync", lambda: None)
    return w


def test_the_workers_nan_trial_fails_a_dropped_nan_and_restores_the_reference(tmp_path, monkeypatch):
    from state import CorrectnessResult
    w = _cpu_worker(tmp_path, monkeypatch)
    before = {k: v.clone() for k, v in w.ref.state_dict().items()}

    class Honest(torch.nn.Module):  # the reference's own computation, with its own BatchNorm
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.BatchNorm1d(16)

        def forward(self, x):
            return torch.relu(self.bn(x)) + x.amax(dim=1, keepdim=True)

    class DropsNan(Honest):  # the row max through fmaxf: a NaN in the row ignored
        def forward(self, x):
            return torch.relu(self.bn(x)) + torch.nan_to_num(x, nan=-1e30).amax(dim=1, keepdim=True)

    corr, ops = CorrectnessResult(passed=False, trials=0), []
    assert w._nan_trial(Honest(), KernelAPI(None), 5, ops, corr) == "" and corr.nan_trial == "passed"
    corr = CorrectnessResult(passed=False, trials=0)
    why = w._nan_trial(DropsNan(), KernelAPI(None), 5, ops, corr)
    assert "finite where eager gives NaN" in why and corr.nan_trial.startswith("failed")
    after = w.ref.state_dict()  # four forwards in training mode, three with NaN: the running statistics as they were
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert torch.backends.cudnn.enabled  # the dependence runs' switch restored


def test_the_workers_nan_trial_skips_where_eager_fails(tmp_path, monkeypatch):
    from state import CorrectnessResult
    w = _cpu_worker(tmp_path, monkeypatch)

    def broken(*xs):
        raise RuntimeError("no kernel for this without cuDNN")
    w.ref = broken
    w.ref.buffers = lambda: []
    corr = CorrectnessResult(passed=False, trials=0)
    assert w._nan_trial(torch.nn.Identity(), KernelAPI(None), 5, [], corr) == "" and corr.nan_trial.startswith("skipped: eager raised RuntimeError")


def test_the_workers_nan_trial_hands_the_candidate_the_references_draws(tmp_path, monkeypatch):
    """A reference that draws inside forward (runtime/draws.py): every reference run of the NaN trial sees the first
    run's draws, and the candidate's egg.draw gets them too, in order, then no replay is left set."""
    from state import CorrectnessResult
    w = _cpu_worker(tmp_path, monkeypatch)
    w.ref = lambda x: torch.relu(x + torch.randn_like(x))
    w.ref.buffers = lambda: []
    w.draws_random = True
    api, taken = KernelAPI(None), []

    class Drawing(torch.nn.Module):
        def forward(self, x):
            noise = api.draw("randn", x.shape, x.dtype, x.device)
            taken.append(noise)
            return torch.relu(x + noise)

    corr = CorrectnessResult(passed=False, trials=0)
    assert w._nan_trial(Drawing(), api, 5, [], corr) == "" and corr.nan_trial == "passed"
    assert len(taken) == 1 and api.replay is None
