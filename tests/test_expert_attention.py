"""Fused attention (agents/expert/templates/attention.py): which graphs fuse, and the kernel against a
float64 truth on the CPU emulator (sizes that leave partial query and key tiles)."""
from __future__ import annotations

import pytest

from agents.expert.agent import ExpertAgent
from hardware_profiles import load_profile
from tests import cpu_emulator

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def _task(tmp, body: str, inputs: str, init: str = "", name: str = "attn.py"):
    p = tmp / name
    p.write_text(HEAD + "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                 f"{init or '        pass'}\n    def forward(self, q, k, v):\n        {body}\n"
                 f"def get_inputs():\n    return [{inputs}]\ndef get_init_inputs():\n    return []\n")
    return p


def _check(p, fams_want=None, ring=True):
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    stages = [f for _, f, _, _ in plan.stages()] if fam == "program" else [fam]
    assert "attention" in stages, stages
    if fams_want is not None:
        assert stages == fams_want, stages
    if not cpu_emulator.available():
        pytest.skip("no g++")
    sg, f, pl, _ = plan.stages()[plan.tuned] if fam == "program" else (g, fam, plan, None)
    k = agent.emit(g, fam, plan, {**agent._default(f, sg, pl, None), "ring": ring}, load_profile("h200"))
    assert "egg_attention" in k.kernel_names
    from runtime.compile import compile_check
    assert compile_check(k.cuda_source, k.compile_options, "sm_90a").ok
    err, eager_err = cpu_emulator.run_module(p, g, k, p.parent / "emu", input_seed=5)
    assert err < 32 * max(eager_err, 2 ** -24), (err, eager_err)
    return g


@pytest.mark.parametrize("shapes,scale", [
    (((2, 3, 70, 16), (2, 3, 75, 16), (2, 3, 75, 24)), None),  # partial tiles of queries and keys, Ev != E
    (((3, 20, 8), (3, 130, 8), (3, 130, 8)), 0.7),  # three key tiles, the last of 2 keys
])
def test_sdpa_is_one_kernel_matching_a_float64_truth(tmp_egg, shapes, scale):
    sq, sk, sv = shapes
    p = _task(tmp_egg, f"return F.scaled_dot_product_attention(q, k, v, scale={scale})",
              f"torch.randn{sq}, torch.randn{sk}, torch.randn{sv}")
    _check(p, ["attention"])


def test_k_stored_transposed_is_read_in_place(tmp_egg):
    """torch.bmm(q, kt) with kt an input of (n, E, S): K's tile loaded from its columns."""
    p = _task(tmp_egg, "return torch.bmm(torch.softmax(torch.bmm(q, k) * 0.3, dim=-1), v)",
              "torch.rand(2, 33, 16), torch.rand(2, 16, 90), torch.randn(2, 90, 8)")
    g = _check(p, ["attention"], ring=False)
    (at,) = [n for n in g.nodes if n.kind == "attention"]
    from agents.expert.templates import attention
    assert not attention.plan_attention(g).k_rows and at.op == "softmax"


MASKED = ("        self.register_buffer('bias', torch.tril(torch.ones(160, 160)).view(1, 1, 160, 160))")


@pytest.mark.parametrize("act,op,ring", [("F.softmax(att, dim=-1)", "softmax", True), ("F.relu(att)", "pointwise", True),
                                         ("F.softmax(att, dim=-1)", "softmax", False)])
def test_causal_mask_from_a_buffer_is_in_the_scores_chain(tmp_egg, act, op, ring):
    """minGPT's masked_fill(bias[:, :, :T, :T] == 0, -inf) (KernelBench level 3 43/44) before a softmax, and
    level 3 50's ReLU weights: the mask read from the buffer at each score's index; rows past the end of the
    keys and masked keys count for nothing, and key tiles masked for all of a block's rows are skipped (150
    queries: three tiles of 64, the three above the diagonal masked)."""
    body = ("T = q.size(-2)\n        att = (q @ k.transpose(-2, -1)) * 0.25\n"
            "        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))\n"
            f"        att = {act}\n        return att @ v")
    p = _task(tmp_egg, body, "torch.randn(2, 2, 150, 16), torch.randn(2, 2, 150, 16), torch.randn(2, 2, 150, 16)", MASKED)
    g = _check(p, ring=ring)
    (at,) = [n for n in g.nodes if n.kind == "attention"]
    assert at.op == op and "masked_fill" in at.attrs["chain"] and at.attrs["mask"] is not None


def test_scores_read_elsewhere_stay_materialised(tmp_egg):
    """Weights the model also returns (or sums) are written: no fusion, the matmuls and the row softmax."""
    p = _task(tmp_egg, "w = torch.softmax(q @ k.transpose(-2, -1), dim=-1)\n        return (w @ v).sum() + w.sum()",
              "torch.randn(2, 9, 8), torch.randn(2, 9, 8), torch.randn(2, 9, 8)")
    g, fam, plan = ExpertAgent()._plan(str(p))
    assert all(n.kind != "attention" for n in g.nodes)


def test_heads_too_wide_for_the_registers_stay_two_gemms(tmp_egg):
    """Level 1 task 97's heads of 1024: the matmuls around a row softmax, as before."""
    p = _task(tmp_egg, "return F.scaled_dot_product_attention(q, k, v)",
              "torch.randn(2, 8, 136), torch.randn(2, 8, 136), torch.randn(2, 8, 136)")
    g, fam, plan = ExpertAgent()._plan(str(p))
    assert all(n.kind != "attention" for n in g.nodes)
    assert [f for _, f, _, _ in plan.stages()] == ["gemm", "rows", "gemm"]


@pytest.mark.parametrize("head,ring", [(32, True), (64, False), (96, False)])
def test_the_ring_only_where_four_blocks_an_sm_still_fit(tmp_egg, head, ring):
    """Blocks beat copies a tile ahead (H100: heads of 64 2.39 ms with the ring at two blocks an SM, 2.06 without
    at four): the default keeps the ring only where four blocks an SM fit with it, on the H200's shared memory."""
    p = _task(tmp_egg, "return F.scaled_dot_product_attention(q, k, v)",
              f"torch.randn(1, 2, 256, {head}), torch.randn(1, 2, 256, {head}), torch.randn(1, 2, 256, {head})")
    agent = ExpertAgent()
    g, fam, plan = agent._plan(str(p))
    assert fam == "attention"
    assert agent._default(fam, g, plan, None, load_profile("h200"))["ring"] is ring


COSINE = ("        self.logit_scale = nn.Parameter(torch.log(10 * torch.ones((2, 1, 1))))\n"
          "        self.cpb = nn.Sequential(nn.Linear(2, 32), nn.ReLU(inplace=True), nn.Linear(32, 2, bias=False))\n"
          "        self.register_buffer('table', torch.randn(1, 7, 7, 2))\n"
          "        self.register_buffer('index', torch.randint(0, 49, (16 * 16,)))\n"
          "        self.register_buffer('mask', torch.randn(3, 16, 16))")
COSINE_BODY = ("attn = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-2, -1)\n"
               "        attn = attn * torch.clamp(self.logit_scale, max=torch.log(torch.tensor(1. / 0.01))).exp()\n"
               "        bias = self.cpb(self.table).view(-1, 2)[self.index].view(16, 16, -1).permute(2, 0, 1).contiguous()\n"
               "        attn = attn + 16 * torch.sigmoid(bias).unsqueeze(0)\n"
               "        attn = (attn.view(2, 3, 2, 16, 16) + self.mask.unsqueeze(1).unsqueeze(0)).view(-1, 2, 16, 16)\n"
               "        return torch.softmax(attn, dim=-1) @ v")


def test_a_score_bias_computed_from_parameters_alone_is_an_input_of_the_fused_kernel(tmp_egg):
    """Swin V2's attention: cosine scores, a clamped logit scale, a position bias from an MLP on a buffer (two Linear
    layers: matmuls the scores' chain reads but no input reaches), gathered by an index buffer, and the shift mask.
    The MLP's output is a tensor of parameters alone: the attention node takes it as an input (a stage before it computes
    it, once a weight version) and the scores, softmax and product are one kernel, against a float64 truth."""
    p = _task(tmp_egg, COSINE_BODY, "torch.randn(6, 2, 16, 8), torch.randn(6, 2, 16, 8), torch.randn(6, 2, 16, 8)",
              init=COSINE)
    g = _check(p)
    (at,) = [n for n in g.nodes if n.kind == "attention"]
    (i, table), = at.attrs["computed"]
    assert table.kind == "gemm" and at.args[3 + i] is table
