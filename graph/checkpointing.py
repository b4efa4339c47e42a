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

from graph.errors import CheckpointError
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
    conn = _open_sqlite(path, must_exist)
    try:
        saver = SqliteSaver(conn, serde=serializer())
        try:
            saver.setup()
        except sqlite3.Error as exc:
            raise CheckpointError(_advice(path, exc)) from None
        try:
            yield saver
        except sqlite3.DatabaseError as exc:  # became unwritable or corrupt mid-run: say where, never a bare traceback
            raise CheckpointError(_advice(path, exc) + "; files already written under the run's out folder are kept") from None
    finally:
        conn.close()


def _advice(path: Path, exc: BaseException) -> str:
    msg = " ".join(str(exc).split())[:200]
    if "not a database" in msg or "malformed" in msg:
        return (f"{path} is not a usable SQLite checkpoint file ({msg}): move it aside and start again, "
                "or choose another file with --checkpoint PATH")
    if "readonly" in msg or "unable to open" in msg or "permission" in msg.lower():
        return f"cannot write the checkpoint file {path} ({msg}): choose a writable one with --checkpoint PATH or $EGG_CHECKPOINT"
    return f"checkpoint file {path}: {msg}"


def _open_sqlite(path: Path, must_exist: bool) -> sqlite3.Connection:
    """Open, check it is a sound SQLite file, and (unless only read) that it can be written: before any work."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(f"cannot create the folder for the checkpoint file {path} ({exc.strerror}): "
                              "choose another with --checkpoint PATH") from None
    read_only = must_exist and not os.access(path, os.W_OK)
    try:
        # several processes (a Ray bench's workers) may share the file: wait for the lock, readers beside a writer
        conn = sqlite3.connect(f"file:{path}?mode=ro" if read_only else str(path), uri=read_only,
                               check_same_thread=False, timeout=60)
        if not read_only:
            conn.execute("PRAGMA journal_mode=WAL")
        ok = conn.execute("PRAGMA quick_check(1)").fetchone()
        if ok and ok[0] != "ok":
            raise sqlite3.DatabaseError(f"database disk image is malformed ({ok[0]})")
    except sqlite3.Error as exc:
        raise CheckpointError(_advice(path, exc)) from None
    return conn
