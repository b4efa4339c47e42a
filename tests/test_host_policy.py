"""The host-code policy (runtime/host_policy.py): every planted cheat that needs a forbidden name,
import or assignment is refused before it runs, with the line and the reason; the expert's own
host code, for every bundled and KernelBench task it covers, passes."""
from pathlib import Path

import pytest
import torch

from runtime.host_policy import PolicyError, Snapshot, check_host_code
from tests import planted
from tests.conftest import ROOT

KB = ROOT.parent / "shared" / "kernelbench"


@pytest.mark.parametrize("name,src,policy,says", planted.POLICY_CHEATS, ids=[c[0] for c in planted.POLICY_CHEATS])
def test_cheat_is_refused(name, src, policy, says):
    with pytest.raises(PolicyError) as exc:
        check_host_code(src, policy)
    assert says in str(exc.value) and "line" in str(exc.value), str(exc.value)


@pytest.mark.parametrize("src", [planted.HONEST, planted.CACHES, planted.COPY, planted.MEMO_POINTER,
                                 planted.COUNTS_CALLS, planted.RETURNS_INPUT, planted.RENAMED_OP])
def test_allowed_shapes_pass_the_policy(src):
    """These are caught (if cheats) by the dynamic checks, not by the policy: it must not refuse them."""
    check_host_code(src, "mixed")


def test_mixed_allows_functional_strict_does_not():
    src = "import torch.nn.functional as F\n" + planted.HONEST
    check_host_code(src, "mixed")
    with pytest.raises(PolicyError, match="imports torch.nn.functional"):
        check_host_code(src, "strict")
    with pytest.raises(ValueError, match="unknown guard policy"):
        check_host_code(planted.HONEST, "lenient")


def test_expert_host_code_passes_everywhere(tmp_egg):
    from agents.protocol import StageRequest
    from agents.expert import ExpertAgent
    from hardware_profiles import load_profile
    from state import DesignRecord
    from tasks import find_task_files, load_task, task_spec
    paths = find_task_files([ROOT / "tasks" / "suite"] + ([KB / "level1", KB / "level2"] if KB.exists() else []))
    agent, prof, checked = ExpertAgent(), load_profile("h200"), 0
    for p in paths:
        if agent.precheck(str(p)):
            continue
        req = StageRequest(stage="algorithm_design", round=1, task=task_spec(load_task(p)), analysis=None,
                           profile=prof, design=DesignRecord(), attempts=[], best=None, max_candidates=1)
        for k in agent.propose(req).kernels:
            check_host_code(k.host_code, k.guard_policy)
            checked += 1
    assert checked >= 40


def test_snapshot_sees_a_rebound_timer():
    snap = Snapshot()
    assert snap.changed() == []
    orig = torch.cuda.Event.elapsed_time
    try:
        torch.cuda.Event.elapsed_time = lambda self, other: 0.0
        assert "torch.cuda.Event.elapsed_time" in snap.changed()
    finally:
        torch.cuda.Event.elapsed_time = orig
    import runtime.correctness as c
    orig_mult = c.RULE_MULTIPLE
    try:
        c.RULE_MULTIPLE = 1e9
        assert "runtime.correctness.RULE_MULTIPLE" in snap.changed()
    finally:
        c.RULE_MULTIPLE = orig_mult
    assert snap.changed() == []


def test_fingerprint_sees_swaps_and_set(tmp_egg):
    from runtime.memory import fingerprint
    x = torch.randn(1000)
    fp = fingerprint([x, 3])
    assert fingerprint([x, 3]) == fp
    y = x.clone()
    y[[1, 2]] = y[[2, 1]]  # a swap keeps the plain sum
    assert fingerprint([y, 3])[0][-2] == fp[0][-2] and fingerprint([y, 3]) != fp
    x.set_(torch.zeros(1000))
    assert fingerprint([x, 3]) != fp
    assert Path(__file__).exists()


def test_widened_inputs_keep_shape_zeros_and_scale_and_widen_in_place():
    """The widened trial's inputs: signs flipped at random, |scale| in [0.5, 1.5], zeros kept, the
    same draw for the same seed; a fresh contiguous input widened in place (a 16 GiB
    input widened whole needed five times its size), a strided view out of place with its layout."""
    from runtime.worker import _widen
    torch.manual_seed(0)
    x = torch.rand(3001) + 0.1
    x[::7] = 0
    t = torch.rand(40, 30).T  # a transposed view
    ref_x, ref_t = x.clone(), t.clone()
    ptr = x.data_ptr()
    y, u, n = _widen([x, t, 5], seed=9, chunk=256)
    assert y.data_ptr() == ptr and n == 5  # in place
    assert u.shape == t.shape and u.stride() == t.stride() and u.data_ptr() != t.data_ptr()
    assert torch.equal(t, ref_t)
    r = y / ref_x.clamp_min(1e-30)
    nz = ref_x != 0
    assert bool((y[~nz] == 0).all()) and bool((r[nz].abs() >= 0.5 - 1e-6).all() and (r[nz].abs() <= 1.5 + 1e-6).all())
    assert 0.4 < float((r[nz] < 0).float().mean()) < 0.6
    (again,) = _widen([ref_x.clone()], seed=9, chunk=256)
    assert torch.equal(again, y)
    (other,) = _widen([ref_x.clone()], seed=10, chunk=256)
    assert not torch.equal(other, y)
    bf = torch.rand(100, dtype=torch.bfloat16) + 1
    (wb,) = _widen([bf], seed=3)
    assert wb.dtype == torch.bfloat16 and bool((wb < 0).any())


def test_a_program_asserts_alignment_where_any_launch_reads_16_bytes(tmp_path):
    """A program's inputs are checked 16-byte aligned where a later launch, not only the first, reads one 16 bytes at a
    time (a misaligned float4 read is a fault, not an error the user can read)."""
    from agents.expert import host
    from agents.expert.opgraph import export_graph
    from tasks import load_task
    p = tmp_path / "t.py"
    p.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def forward(self, x):\n"
                 "        return torch.softmax(x, dim=1)\ndef get_inputs():\n    return [torch.randn(4, 64)]\n"
                 "def get_init_inputs():\n    return []\n")
    g = export_graph(load_task(p))
    first, later = host.Launch("k0", (1,), (32,), list(g.inputs), 0), host.Launch("k1", (1,), (32,), list(g.inputs), 0)
    assert "data_ptr() % 16" not in host.module_source_program(g, [(first, g.output), (later, g.output)])
    later.align16 = True
    assert "assert x0.data_ptr() % 16 == 0" in host.module_source_program(g, [(first, g.output), (later, g.output)])
