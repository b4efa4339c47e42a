"""Run the reference once (on meta tensors where it can) to learn shapes, FLOPs and bytes,
and place it on the hardware profile's roofline."""
from __future__ import annotations

import torch
from torch.utils.flop_counter import FlopCounterMode

from runtime.correctness import as_list
from runtime.guard import OpRecorder, classify
from state import Roofline, TaskAnalysis, TensorSpec

GIB = float(1 << 30)
CPU_FALLBACK_BYTES = 8 << 30  # a reference that meta tensors cannot run is run on the CPU up to this size


class TaskTooLarge(ValueError):
    """The task cannot fit on the profile's GPU; the message has the numbers."""


MATMUL_OPS = {"mm", "bmm", "addmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"}


def _spec(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."))


def _nbytes(t) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


def _run(model, inputs):
    with torch.no_grad(), OpRecorder() as rec, FlopCounterMode(display=False) as fc:
        out = model(*inputs)
    return out, rec.ops, fc.get_total_flops()


def analyze(task, profile) -> TaskAnalysis:
    """Meta tensors give shapes and FLOPs without computing; a CPU run is the fallback."""
    notes = []
    with torch.device("meta"):  # parameters of any size: nothing is allocated
        model = task.make_model(42)
    inputs = task.make_inputs(1, "meta")
    try:
        out, ops, mm_flops = _run(model, inputs)
    except Exception as exc:
        notes.append(f"meta run failed ({type(exc).__name__}); ran on the CPU")
        need = sum(_nbytes(p) for p in model.parameters()) + sum(_nbytes(x) for x in inputs)
        if need > CPU_FALLBACK_BYTES:
            raise TaskTooLarge(f"the reference does not run on meta tensors ({type(exc).__name__}) and its "
                               f"{need / GIB:.1f} GiB of inputs and parameters are too large to run on the CPU") from None
        model, inputs = task.make_model(42), task.make_inputs(1)
        out, ops, mm_flops = _run(model, inputs)
    outs = [o for o in as_list(out) if isinstance(o, torch.Tensor)]
    need = (sum(_nbytes(p) for p in model.parameters()) + sum(_nbytes(b) for b in model.buffers())
            + sum(_nbytes(x) for x in inputs) + sum(_nbytes(o) for o in outs))
    if profile.memory_bytes and need > profile.memory_bytes:
        raise TaskTooLarge(f"the task needs {need / GIB:.1f} GiB for its inputs, outputs and parameters alone; "
                           f"the {profile.name} has {profile.memory_bytes / GIB:.1f} GiB")
    # FlopCounterMode counts matmul-like ops; charge one FLOP per output element of each other compute op
    other = 0
    compute = [o for o in ops if classify(o) == "compute"]
    elems = max((o.numel() for o in outs), default=0)
    other = sum(elems for o in compute if o.split("::")[-1].split(".")[0] not in MATMUL_OPS)
    flops = float(mm_flops + other)
    params = sum(_nbytes(p) for p in model.parameters()) + sum(_nbytes(b) for b in model.buffers())
    nbytes = float(sum(_nbytes(x) for x in inputs) + sum(_nbytes(o) for o in outs) + params)
    dtype = next((str(x.dtype).removeprefix("torch.") for x in inputs if isinstance(x, torch.Tensor)
                  and x.is_floating_point()), "float32")
    peak = profile.flops(dtype)
    bw = profile.bandwidth()
    # fp32 matmuls and convolutions can run on tensor cores (3xTF32 at fp32 grade, TF32 where eager's
    # cuDNN does): their FLOPs are placed at the TF32 peak, so the floor stays a bound no kernel beats
    mm_peak = profile.flops("tf32") if dtype == "float32" else peak
    t_mem, t_comp = nbytes / bw, (mm_flops / mm_peak + (flops - mm_flops) / peak)
    if mm_flops and mm_peak != peak:
        notes.append(f"matmul/conv FLOPs placed at the TF32 tensor-core peak ({mm_peak / 1e12:.0f} TFLOP/s)")
        peak = flops / t_comp
    roof = Roofline(flops=flops, bytes_moved=nbytes, bound="memory" if t_mem >= t_comp else "compute",
                    floor_ms=max(t_mem, t_comp) * 1e3, peak_flops=peak, bandwidth_bytes_s=bw)
    return TaskAnalysis(inputs=[_spec(x) for x in inputs if isinstance(x, torch.Tensor)],
                        outputs=[_spec(o) for o in outs], ops=ops, roofline=roof, notes=notes)
