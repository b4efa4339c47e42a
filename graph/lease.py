"""A per-thread lease in the checkpoint store: one process runs a thread at a time.

Two `egg resume` of one thread would both run the remaining stages; the second now says who
holds it. A lease whose process is gone (same host, dead pid) or older than LEASE_TTL_S (another
host) is taken over. Works on both checkpointers (SQLite and Postgres), in the same database.
"""
from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager

from graph.errors import ThreadBusyError

LEASE_TTL_S = 12 * 3600
_DDL = "CREATE TABLE IF NOT EXISTS egg_leases (thread_id TEXT PRIMARY KEY, host TEXT, pid INTEGER, since DOUBLE PRECISION)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sql(saver, q: str) -> str:
    return q if type(saver).__name__.startswith("Sqlite") else q.replace("?", "%s")


@contextmanager
def lease(saver, thread_id: str):
    conn, host, pid = saver.conn, socket.gethostname(), os.getpid()
    conn.execute(_DDL)
    row = conn.execute(_sql(saver, "SELECT host, pid, since FROM egg_leases WHERE thread_id = ?"), (thread_id,)).fetchone()
    if row is not None:
        h, p, since = (row["host"], row["pid"], row["since"]) if isinstance(row, dict) else row
        stale = (h == host and (p == pid or not _alive(p))) or (h != host and time.time() - since > LEASE_TTL_S)
        if not stale:
            raise ThreadBusyError(f"thread {thread_id!r} is being run by pid {p} on {h} since "
                                  f"{time.strftime('%H:%M:%S', time.localtime(since))}; wait for it, or stop that process")
    conn.execute(_sql(saver, "DELETE FROM egg_leases WHERE thread_id = ?"), (thread_id,))
    conn.execute(_sql(saver, "INSERT INTO egg_leases (thread_id, host, pid, since) VALUES (?, ?, ?, ?)"),
                 (thread_id, host, pid, time.time()))
    if hasattr(conn, "commit") and type(saver).__name__.startswith("Sqlite"):
        conn.commit()
    try:
        yield
    finally:
        conn.execute(_sql(saver, "DELETE FROM egg_leases WHERE thread_id = ? AND pid = ?"), (thread_id, pid))
        if type(saver).__name__.startswith("Sqlite"):
            conn.commit()
