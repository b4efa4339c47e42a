"""The expert optimization principles per stage: data shared by the expert and LLM agents."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import yaml

HERE = Path(__file__).parent


@lru_cache(maxsize=None)
def load(stage: str) -> dict:
    return yaml.safe_load((HERE / f"{stage}.yaml").read_text())


def knobs(stage: str) -> dict:
    return load(stage).get("knobs") or {}


def principles(stage: str) -> list[str]:
    return list(load(stage).get("principles") or [])
