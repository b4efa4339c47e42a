"""Checkpointers: SQLite by default (a file path), with a serializer that allows exactly
the project's state classes, so state comes back as those classes and a tampered
checkpoint cannot name any other class."""
from __future__ import annotations

import os
import sqlite3
from contextlib import contextmanager
from pathlib import Path

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver

from hardware_profiles import HardwareProfile
from state import ALL_ENUMS, ALL_MODELS

DEFAULT_CHECKPOINT = os.environ.get("EGG_CHECKPOINT", ".egg/checkpoints.sqlite")


def serializer() -> JsonPlusSerializer:
    return JsonPlusSerializer(allowed_msgpack_modules=[*ALL_MODELS, *ALL_ENUMS, HardwareProfile])


def is_postgres(target: str | None) -> bool:
    return bool(target) and target.startswith(("postgresql://", "postgres://"))


@contextmanager
def open_checkpointer(target: str | None = None, must_exist: bool = False):
    """A SQLite file path (the default), or a postgresql:// URL for a checkpointer shared by many hosts."""
    target = target or DEFAULT_CHECKPOINT
    if is_postgres(target):
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg import Connection
        from psycopg.rows import dict_row
        try:
            conn = Connection.connect(target, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        except Exception as exc:
            raise FileNotFoundError(f"cannot connect to the Postgres checkpointer: {str(exc).strip()[:200]}") from None
        with conn:
            saver = PostgresSaver(conn, serde=serializer())
            saver.setup()  # creates or migrates the checkpoint tables
            yield saver
        return
    path = Path(target)
    if must_exist and not path.exists():
        raise FileNotFoundError(f"no checkpoint file at {path} (start a run with `egg optimize` first)")
    path.parent.mkdir(parents=True, exist_ok=True)
    # several processes (a Ray bench's workers) may share the file: wait for the lock, let readers run beside a writer
    conn = sqlite3.connect(str(path), check_same_thread=False, timeout=60)
    conn.execute("PRAGMA journal_mode=WAL")
    try:
        saver = SqliteSaver(conn, serde=serializer())
        saver.setup()
        yield saver
    finally:
        conn.close()
