"""The CPU emulator's prelude as a precompiled header (tests/cpu_emulator.py, `_prelude_pch`): built once a process and
used by every build with the same flags; where g++ cannot build one, the prelude is compiled inline as before."""
from pathlib import Path

import pytest
import torch

from tests import cpu_emulator

SRC = """
extern "C" __global__ void __launch_bounds__(64) egg_k(float* __restrict__ out, const float* __restrict__ x) {
    __shared__ float s[64];
    const int i = blockIdx.x * 64 + threadIdx.x;
    s[threadIdx.x] = i < 100 ? x[i] : 0.0f;
    __syncthreads();
    if (i < 100) out[i] = s[63 - threadIdx.x] * 2.0f;  // another thread's value: the barrier is real
}
"""


def _want(x):
    blocks = torch.nn.functional.pad(x, (0, 28)).reshape(2, 64).flip(1).reshape(-1)
    return (blocks * 2.0)[:100]


def test_the_prelude_is_built_once_and_a_build_without_it_gives_the_same(tmp_egg, monkeypatch):
    if not cpu_emulator.available():
        pytest.skip("no g++")
    x = torch.randn(100)
    got = cpu_emulator.run(SRC, "egg_k", 2, 64, (100,), [x], tmp_egg / "pch")
    assert torch.equal(got, _want(x))
    flags = ("-O1", "-std=c++20", "-pthread")
    built = cpu_emulator._PCH[flags]
    assert built is not None and (Path(built) / "emu_prelude.h.gch").is_file()  # built for these flags, kept
    assert '#include "emu_prelude.h"' in (tmp_egg / "pch" / "p.cpp").read_text()
    monkeypatch.setitem(cpu_emulator._PCH, flags, None)  # as where g++ could not build one
    again = cpu_emulator.run(SRC, "egg_k", 2, 64, (100,), [x], tmp_egg / "inline")
    assert torch.equal(again, got)
    assert '#include "emu_prelude.h"' not in (tmp_egg / "inline" / "p.cpp").read_text()
