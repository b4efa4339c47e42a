"""The float64 rule (runtime/correctness.py) on the CPU: a reordered fp32 sum is accepted, a
precision downgrade (fp16 or TF32 arithmetic on an fp32 matmul) and a wrong kernel are rejected,
and KernelBench's own check is available beside it."""
import pytest
import torch

from runtime.correctness import (check_structure, error_stats, float64_rule, kernelbench_allclose,
                                 relative_diff)


def judge(cand, eager, truth):
    return float64_rule(error_stats(cand, truth), error_stats(eager, truth), eager.dtype)


def tf32(x):
    """Round an fp32 tensor's mantissa to TF32's 10 bits."""
    return (x.view(torch.int32) & ~0x1FFF).view(torch.float32)


def test_reordered_sum_is_accepted():
    torch.manual_seed(0)
    x = torch.rand(64, 65536)
    truth = x.double().sum(1)
    eager = x.sum(1)
    # another order: columns reversed, summed in 256 sequential partial sums, then the partials
    cand = x.flip(1).reshape(64, 256, 256).sum(2).sum(1)
    assert not torch.equal(cand, eager)  # really another rounding
    assert judge(cand, eager, truth) == ""


def test_plain_sequential_sum_is_accepted():
    """A per-thread running sum over a 4096-long row (the row template's thread mapping): 14x eager's
    cascaded sum here, 19x on the H200 (KernelBench 47): inside the rule."""
    torch.manual_seed(5)
    x = torch.rand(64, 4096, 64)
    acc = torch.zeros(64, 64)
    for r in range(4096):
        acc = acc + x[:, r, :]
    assert judge(acc, x.sum(1), x.double().sum(1)) == ""


def test_fp16_and_tf32_matmuls_are_rejected():
    torch.manual_seed(1)
    a, b = torch.randn(256, 1024), torch.randn(1024, 256)
    truth = a.double() @ b.double()
    eager = a @ b  # exact fp32
    assert judge(eager.clone(), eager, truth) == ""
    half = (a.half().float() @ b.half().float())  # fp16 operands
    why = judge(half, eager, truth)
    assert "norm-wise error vs float64" in why, why
    why = judge(tf32(a) @ tf32(b), eager, truth)
    assert "error vs float64" in why, why


def test_wrong_kernels_are_rejected():
    torch.manual_seed(2)
    x = torch.randn(4096)
    truth = torch.nn.functional.gelu(x.double())
    eager = torch.nn.functional.gelu(x)
    tanh_gelu = torch.nn.functional.gelu(x, approximate="tanh")  # another function, close but not the same
    assert "error vs float64" in judge(tanh_gelu, eager, truth)
    assert "constant" in judge(torch.zeros(4096), eager, truth) or "error" in judge(torch.zeros(4096), eager, truth)
    nan = eager.clone()
    nan[7] = float("nan")
    why = judge(nan, eager, truth)
    assert "NaN/Inf where the reference is finite" in why and "index 7" in why
    one = eager.clone()
    one[123] += 1e-3  # one wrong element in 4096: invisible norm-wise at this size? the max error sees it
    assert "error vs float64" in judge(one, eager, truth)


def test_exact_outputs_get_rounding_room_only():
    x = torch.randn(10000)
    truth, eager = x.double().relu(), x.relu()
    assert judge(eager.clone(), eager, truth) == ""
    assert judge(eager * (1 + 2e-7), eager, truth) == ""  # a few ulp
    assert "error" in judge(eager * (1 + 1e-5), eager, truth)


def test_chunked_stats_match_unchunked():
    torch.manual_seed(3)
    x, t = torch.randn(100_000), torch.randn(100_000).double()
    a, b = error_stats(x, t), error_stats(x, t, chunk=7_777)
    assert abs(a.norm - b.norm) < 1e-12 and a.max == b.max and (a.x_min, a.t_max) == (b.x_min, b.t_max)
    assert abs(relative_diff(x, t.float()) - relative_diff(x, t.float(), chunk=999)) < 1e-12


def test_kernelbench_rule_and_structure():
    e = torch.randn(1000)
    assert kernelbench_allclose(e + 5e-5, e) == ""
    assert "outside atol=rtol=0.0001" in kernelbench_allclose(e + 1e-3, e)
    assert kernelbench_allclose((e + 5e-3).bfloat16(), e.bfloat16()) == ""

    class Lazy(torch.Tensor):
        pass
    assert "not a plain torch.Tensor" in check_structure([e.as_subclass(Lazy)], [e])
    assert "shape" in check_structure([e[:10]], [e])
    assert "dtype" in check_structure([e.double()], [e])
    assert "returned 2 outputs" in check_structure([e, e], [e])


def test_the_float64_truth_casts_tensor_attributes_too():
    """An RNN's initial state kept as a plain attribute is left in float32 by `.to(torch.float64)`, and the
    float64 reference would fail on it (mixed dtypes): in_float64 casts it with the parameters."""
    import torch

    from runtime.correctness import in_float64

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.h0 = torch.randn(2, 4)

        def forward(self, x):
            return self.lin(x) + self.h0

    assert M().to(torch.float64).h0.dtype == torch.float32  # what `.to(dtype)` alone leaves
    m64 = in_float64(M())
    assert m64.h0.dtype == torch.float64 and m64.lin.weight.dtype == torch.float64
    assert m64(torch.randn(2, 4, dtype=torch.float64)).dtype == torch.float64


def test_the_float64_truth_copies_functions_that_close_over_the_model():
    """minGPT's block (KernelBench level 3, 44) keeps `self.mlpf = lambda x: m.c_proj(m.c_fc(x))` over its
    own ModuleDict: a plain deepcopy shares the lambda, so the float64 copy called the float32 layers."""
    import torch

    from runtime.correctness import copy_model, in_float64

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.mlp = torch.nn.ModuleDict({"fc": torch.nn.Linear(4, 8), "proj": torch.nn.Linear(8, 4)})
            m = self.mlp
            self.mlpf = lambda x: m.proj(torch.relu(m.fc(x)))

        def forward(self, x):
            return x + self.mlpf(x)

    torch.manual_seed(0)
    model = Block()
    x = torch.randn(3, 4)
    truth = in_float64(copy_model(model))(x.double())
    assert truth.dtype == torch.float64
    assert model.mlp.fc.weight.dtype == torch.float32  # the original is untouched
    assert torch.allclose(truth.float(), model(x), atol=1e-5)


@pytest.mark.parametrize("err,exact,ran", [
    (None, None, None), (None, 1e-7, None), (0.0, None, True), (0.0, 0.0, True),
    (3e-4, None, True), (2e-7, None, False), (3e-6, None, False),  # the fixed line alone
    (3e-6, 6e-8, True), (3e-6, 2.9e-6, False), (2e-5, 1.9e-5, False), (2e-7, 0.0, True)])
def test_eager_ran_tf32_from_its_error_with_tf32_off(err, exact, ran):
    """Whether eager's conv ran TF32: by how much TF32 raised its error where that was measured (an error averaged
    down by a reduction after the conv sits below any fixed line), else by the fixed line."""
    from state import eager_ran_tf32
    assert eager_ran_tf32(err, exact) is ran
