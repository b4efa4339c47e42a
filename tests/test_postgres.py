"""The Postgres checkpointer against a real PostgreSQL server on loopback: a run, a kill, and a
resume from another process. .ci/run installs the server when the machine lacks it."""
import os
import shutil
import subprocess

import pytest

from graph.runner import get_run, list_runs, optimize
from tests.support import ScriptedAgent, ScriptedEvaluator
from tests.test_resume import kill_then_resume
from tests.test_studio import free_port

PG_BIN = next((d for d in ["/usr/local/bin", *sorted(__import__("glob").glob("/usr/lib/postgresql/*/bin"), reverse=True)]
               if os.path.exists(f"{d}/initdb")), None)
pytestmark = pytest.mark.skipif(PG_BIN is None, reason="no PostgreSQL server binaries (initdb)")


@pytest.fixture(scope="module")
def pg_url():
    import tempfile
    from pathlib import Path
    base = Path(tempfile.mkdtemp(prefix="egg-pg-"))  # not under pytest's 0700 root: the server's user must reach it
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    as_pg = []
    if os.geteuid() == 0:  # the server refuses to run as root
        import pwd
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("running as root with no 'postgres' user to run the server as")
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
        as_pg = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    subprocess.run(as_pg + [f"{PG_BIN}/initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True)
    subprocess.run(as_pg + [f"{PG_BIN}/pg_ctl", "-D", str(data), "-w", "-l", str(base / "log"), "-o",
                            f"-p {port} -k {sock} -c listen_addresses=127.0.0.1", "start"], check=True, capture_output=True)
    yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    subprocess.run(as_pg + [f"{PG_BIN}/pg_ctl", "-D", str(data), "-m", "fast", "stop"], capture_output=True)
    shutil.rmtree(base, ignore_errors=True)


SCRIPT = {"algorithm_design": [[{"ms": 1.0}]], "parallel_mapping": [[{"ms": 0.5}]], "tiling": [[{"ms": 0.4}]],
          "memory_optimization": [[{"ms": 0.3}]]}


def test_run_in_postgres(pg_url, tmp_path, relu_task):
    tid, st = optimize(relu_task, agent_obj=ScriptedAgent(SCRIPT), evaluator_obj=ScriptedEvaluator(), quiet=True,
                       checkpoint=pg_url, out_dir=str(tmp_path / "out"), profile="h200", thread_id="pg-run")
    assert st.result.status == "verified" and st.result.best_ms == 0.3
    again = get_run(tid, pg_url)
    assert type(again.candidates[0]).__name__ == "KernelCandidate" and again.design.best_ms == 0.3
    assert "pg-run" in [r.thread_id for r in list_runs(pg_url)]


def test_kill_then_resume_in_postgres(pg_url, tmp_path, relu_task):
    kill_then_resume(tmp_path, relu_task, pg_url)


def test_unreachable_postgres_is_one_clear_error(tmp_path, relu_task):
    import sys

    from tests.conftest import ROOT
    r = subprocess.run([sys.executable, "-m", "graph.cli", "--checkpoint", f"postgresql://nobody@127.0.0.1:{free_port()}/x",
                        "runs"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 2 and "cannot connect to the Postgres checkpointer" in r.stderr and "Traceback" not in r.stderr


def test_thread_lease_in_postgres(pg_url):
    """The per-thread lease works in the Postgres checkpointer too: a live holder blocks, a dead one is taken over."""
    from tests.support import check_thread_lease
    check_thread_lease(pg_url, "pg-t")
