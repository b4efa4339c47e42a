"""A program's launches replayed as one CUDA graph (runtime/kernel_api.py `graphed`): the bookkeeping
runs on the CPU with a stand-in capture (recorded, replayed by recomputing from the graph's buffers);
the real capture is tested on the GPU (tests/test_gpu_runtime.py)."""
import pytest
import torch

from agents.expert import ExpertAgent
from agents.expert.agent import graph_default
from runtime.host_policy import check_host_code
from runtime.kernel_api import KernelAPI
from tests.support import stage_kernels


class Owner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randn(4))


def _setup(fail_capture=False):
    api, owner = KernelAPI(None), Owner()
    captures, runs = [], []

    def run(x):  # two launches' worth of work, as a program's `_run` does through egg.launch
        if api.skip:
            api.launches += 2
            return torch.full_like(x, float("nan"))
        api.launches += 2
        runs.append(x)
        return x * 2 + owner.w

    def capture(r, static):
        if fail_capture:
            raise RuntimeError("operation not permitted when stream is capturing")
        before = api.launches
        out = r(*static)  # a real capture records, it does not run: the stand-in's run is undone
        api.launches = before
        captures.append(static)
        return (lambda: out.copy_(static[0] * 2 + owner.w)), out
    api._capture = capture
    return api, owner, run, captures, runs


def test_graphed_runs_first_call_captures_second_and_replays_with_fresh_inputs():
    api, owner, run, captures, runs = _setup()
    xs = [torch.randn(4) for _ in range(4)]
    outs = [api.graphed(owner, run, [x]) for x in xs]
    for x, o in zip(xs, outs):
        assert torch.equal(o, x * 2 + owner.w)  # each call's own inputs, not the captured ones
    assert len(captures) == 1 and len(runs) == 2  # run directly once, then once inside the capture
    assert api.launches == 8  # every call counts its launches, the capture's own are not counted
    assert len({o.data_ptr() for o in outs}) == 4  # a fresh output each call: the graph's own is copied
    assert captures[0][0] is not xs[1]  # captured on copies, never on the caller's tensors


def test_graphed_launches_directly_while_skipped_or_timed_per_kernel():
    api, owner, run, captures, _ = _setup()
    x = torch.randn(4)
    api.graphed(owner, run, [x])
    api.graphed(owner, run, [x])
    api.skip = True
    assert torch.isnan(api.graphed(owner, run, [x])).all()  # the verifier's "own kernels matter" check
    api.skip = False
    api.events = []
    assert torch.equal(api.graphed(owner, run, [x]), x * 2 + owner.w)
    assert len(captures) == 1


def test_graphed_captures_again_when_buffers_or_shapes_change():
    api, owner, run, captures, _ = _setup()
    x = torch.randn(4)
    for _ in range(3):
        api.graphed(owner, run, [x])
    owner.w = torch.randn(4)  # a buffer replaced (a module moved): the graph read the old address
    for _ in range(2):
        assert torch.equal(api.graphed(owner, run, [x]), x * 2 + owner.w)
    assert len(captures) == 2
    y = torch.randn(2, 4)
    for _ in range(2):
        assert torch.equal(api.graphed(owner, run, [y]), y * 2 + owner.w)
    assert len(captures) == 3


def test_a_refused_capture_falls_back_to_direct_launches():
    api, owner, run, captures, _ = _setup(fail_capture=True)
    xs = [torch.randn(4) for _ in range(3)]
    for x in xs:
        assert torch.equal(api.graphed(owner, run, [x]), x * 2 + owner.w)
    assert "capturing" in api.graph_error and api.launches == 6


def test_programs_of_small_tensors_start_as_a_graph_and_the_other_mode_is_measured():
    agent = ExpertAgent()
    ks = stage_kernels(agent, "tasks/suite/level3/01_resnet_basic_block.py")
    assert ks[0].params["graph"] is True
    assert "egg.graphed(self, self.run_kernels" in ks[0].host_code and "CUDA graph" in ks[0].description
    check_host_code(ks[0].host_code, "strict")  # the verifier's host-code policy lets it run
    assert any(k.params.get("graph") is False and "egg.graphed" not in k.host_code for k in ks)
    g, fam, plan = agent._plan("tasks/suite/level3/01_resnet_basic_block.py")
    assert fam == "program" and graph_default(g, len(plan.stages()))


@pytest.mark.parametrize("launches,big,want", [(1, False, False), (5, False, True), (5, True, False)])
def test_graph_default_weighs_launches_against_the_bytes_copied(launches, big, want):
    from agents.expert.opgraph import Node, OpGraph
    side = 4096 if big else 64
    x = Node("x", "input", shape=(side, side), dtype="float32", index=0)
    out = Node("o", "pw", op="neg", args=[x], shape=(side, side), dtype="float32")
    assert graph_default(OpGraph(nodes=[x, out], inputs=[x], params=[], output=out, aten_ops=[]), launches) is want


def test_staged_runs_once_per_version_of_the_weights_it_reads():
    """`egg.staged`: a program's launches that read only its weights (a conv weight staged channels last) run on the
    first call and again only when what they read changed: an in-place update (its version), a tensor moved or
    replaced (its address); nothing is kept while the verifier skips launches."""
    api, w, s, owner, other = KernelAPI(None), torch.randn(4), torch.empty(4), Owner(), Owner()
    runs = []

    def stage():
        if not api.skip:
            s.copy_(w * 2)
        runs.append(1)
    api.skip = True
    api.staged(owner, stage, [w, s])
    api.skip = False
    for _ in range(3):
        api.staged(owner, stage, [w, s])
    assert len(runs) == 2 and torch.equal(s, w * 2)
    w.add_(1.0)  # an optimiser step
    api.staged(owner, stage, [w, s])
    assert len(runs) == 3 and torch.equal(s, w * 2)
    w2 = w.clone()  # the same values at another address (a module moved)
    api.staged(owner, stage, [w2, s])
    api.staged(owner, stage, [w2, s])
    assert len(runs) == 4
    api.staged(other, stage, [w2, s])  # each module its own
    assert len(runs) == 5


def test_a_programs_weight_launches_move_to_stage_params():
    """ResNet's conv weights are staged channels last by launches that read only parameters: they move to the
    module's `stage_params` (their outputs buffers of its own, not saved with its state), which forward hands to
    `egg.staged` before the graph; the rest of the launches read those buffers. The policy lets it run."""
    agent = ExpertAgent()
    ks = stage_kernels(agent, "tasks/suite/level3/01_resnet_basic_block.py")
    host = ks[0].host_code
    check_host_code(host, "strict")
    stage, forward = host.split("    def stage_params(self):\n")[1].split("\n\n    def forward(")
    staged = stage.strip().splitlines()
    assert staged and all(ln.strip().startswith("egg.launch('egg_conv_wt") for ln in staged)
    bufs = [ln.split("[self.", 1)[1].split(",")[0] for ln in staged]
    assert all(f"self.register_buffer('{b}', torch.empty(" in host and "persistent=False)" in host.split(f"'{b}'")[1].split("\n")[0]
               for b in bufs)
    assert forward.index("egg.staged(self, self.stage_params, [") < forward.index("egg.graphed(")
    assert all(f"self.{b}" in forward.split("def run_kernels")[1] for b in bufs) and "egg_conv_wt" not in forward
