from __future__ import annotations

import warnings
from functools import lru_cache
from pathlib import Path

import yaml
from pydantic import BaseModel, Field

HERE = Path(__file__).parent


class UnknownProfileError(ValueError):
    pass


class HardwareProfile(BaseModel):
    name: str
    match: list[str] = Field(default_factory=list)  # substrings of the CUDA device name
    compute_capability: str  # "9.0"
    arch: str  # nvcc/NVRTC target, e.g. "sm_90a"
    sms: int
    registers_per_sm: int = 65536
    registers_per_block: int = 65536
    shared_per_sm: int
    shared_per_block_optin: int
    max_threads_per_sm: int = 2048
    l2_bytes: int
    memory_bytes: int | None = None  # device memory: a task that cannot fit fails before any work
    mem_bandwidth_gbs: float  # datasheet; measured_bandwidth_gbs wins where known
    measured_bandwidth_gbs: float | None = None
    peak_tflops: dict[str, float]  # fp32, tf32, bf16, fp16 (dense)
    measured_tflops: dict[str, float] = Field(default_factory=dict)
    features: list[str] = Field(default_factory=list)  # cp.async, tma, wgmma, mma.sync, clusters
    source: str = "yaml"

    def bandwidth(self) -> float:
        """Bytes per second used for roofline floors."""
        return (self.measured_bandwidth_gbs or self.mem_bandwidth_gbs) * 1e9

    def flops(self, dtype: str) -> float:
        key = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "tf32": "tf32"}.get(dtype, "fp32")
        rate = self.measured_tflops.get(key) or self.peak_tflops.get(key) or self.peak_tflops["fp32"]
        return rate * 1e12

    def has(self, feature: str) -> bool:
        return feature in self.features


def list_profiles() -> list[str]:
    return sorted(p.stem for p in HERE.glob("*.yaml"))


@lru_cache(maxsize=None)
def load_profile(name: str) -> HardwareProfile:
    path = HERE / f"{name}.yaml"
    if not path.exists():
        raise UnknownProfileError(f"unknown hardware profile '{name}' (known: {', '.join(list_profiles())})")
    return HardwareProfile.model_validate(yaml.safe_load(path.read_text()))


def _from_attributes(name: str, attrs: dict) -> HardwareProfile:
    """A profile built from the live device's attributes, for GPUs with no YAML."""
    major, minor = attrs["ComputeCapabilityMajor"], attrs["ComputeCapabilityMinor"]
    cc = major * 10 + minor
    # memory clock (kHz) x bus width (bits) x 2 (DDR) / 8 -> bytes/s
    bw = attrs.get("MemoryClockRate", 0) * 1e3 * attrs.get("GlobalMemoryBusWidth", 0) * 2 / 8 / 1e9
    feats = ["mma.sync"] if cc >= 80 else []
    if cc >= 80:
        feats.append("cp.async")
    if cc >= 90:
        feats += ["tma", "wgmma", "clusters"]
    return HardwareProfile(
        name=name, match=[name], compute_capability=f"{major}.{minor}",
        arch=f"sm_{cc}" + ("a" if cc == 90 else ""), sms=attrs["MultiProcessorCount"],
        registers_per_sm=attrs.get("MaxRegistersPerMultiprocessor", 65536),
        registers_per_block=attrs.get("MaxRegistersPerBlock", 65536),
        shared_per_sm=attrs.get("MaxSharedMemoryPerMultiprocessor", 0),
        shared_per_block_optin=attrs.get("MaxSharedMemoryPerBlockOptin", 49152),
        max_threads_per_sm=attrs.get("MaxThreadsPerMultiProcessor", 2048),
        l2_bytes=attrs.get("L2CacheSize", 0), mem_bandwidth_gbs=bw or 1000.0,
        memory_bytes=_total_memory(),
        peak_tflops={"fp32": 10.0}, features=feats, source="device attributes",
    )


def _total_memory() -> int | None:
    try:
        import cupy
        return int(cupy.cuda.runtime.memGetInfo()[1])
    except Exception:
        return None


def detect(device: int = 0) -> HardwareProfile:
    """Match the live CUDA device (through CuPy) to a profile; raise if there is none."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError
        dev = cupy.cuda.Device(device)
        name = cupy.cuda.runtime.getDeviceProperties(device)["name"].decode()
        attrs = dev.attributes
    except Exception as exc:  # no driver, no device, no cupy
        raise RuntimeError("no CUDA device found") from exc
    for pname in list_profiles():
        prof = load_profile(pname)
        if any(m.lower() in name.lower() for m in prof.match):
            return prof
    warnings.warn(f"no hardware profile matches '{name}'; using one built from its attributes", stacklevel=2)
    return _from_attributes(name, attrs)
