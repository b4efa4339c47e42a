import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LANGGRAPH_STRICT_MSGPACK", "true")


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tmp_egg(tmp_path, monkeypatch):
    monkeypatch.setenv("EGG_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture
def relu_task():
    return str(ROOT / "tests" / "tasks" / "relu_small.py")
