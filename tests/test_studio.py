"""`langgraph dev` (Studio's server, in-memory runtime) loads the graph offline on 127.0.0.1;
a thread and a run go through langgraph_sdk, events stream, history reads back."""
import os
import shutil
import socket
import subprocess
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(shutil.which("langgraph") is None, reason="langgraph-cli (dev extra) not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(tmp_path, reload: bool):
    port = free_port()
    env = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "EGG_CACHE_DIR": str(tmp_path / "cache"),
           "EGG_OUT_DIR": str(tmp_path / "served_out")}
    log = open(tmp_path / "server.log", "w")  # outside the project: a log inside it would trigger reloads
    proc = subprocess.Popen(["langgraph", "dev", "--host", "127.0.0.1", "--port", str(port), "--no-browser"]
                            + ([] if reload else ["--no-reload"]), cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    from langgraph_sdk import get_sync_client
    client = get_sync_client(url=f"http://127.0.0.1:{port}")
    deadline = time.time() + 120
    while True:
        try:
            client.assistants.search()
            break
        except Exception:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise AssertionError("langgraph dev did not come up on the chosen port:\n" +
                                     (tmp_path / "server.log").read_text()[-3000:]) from None
            time.sleep(1)
    return proc, client


def _stop(proc):
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture
def server(tmp_path):
    proc, client = _serve(tmp_path, reload=False)
    yield client
    _stop(proc)


def test_a_run_survives_another_finishing_with_reload_on(tmp_path, relu_task):
    """As the README starts it (reload on): runs write their kernels outside the watched project, so one run
    finishing does not reload the server and cancel the other."""
    proc, client = _serve(tmp_path, reload=True)
    try:
        settings = {"task_path": relu_task, "evaluator": "compile_only", "profile": "h200"}  # default out_dir
        a, b = client.threads.create(), client.threads.create()
        ra = client.runs.create(a["thread_id"], "egg", input={"settings": settings})
        rb = client.runs.create(b["thread_id"], "egg", input={"settings": {**settings, "budget": {"candidates_per_stage": 1}}})
        for t, r in ((a, ra), (b, rb)):
            client.runs.join(t["thread_id"], r["run_id"])
            assert client.runs.get(t["thread_id"], r["run_id"])["status"] == "success"
            assert client.threads.get_state(t["thread_id"])["values"]["result"]["status"] == "unverified"
        log = (tmp_path / "server.log").read_text()
        assert "Reloading" not in log and "CancelledError" not in log, log[-2000:]
        assert list((tmp_path / "served_out" / "egg_out" / "relu_small").glob("*/report.md"))
        assert not (ROOT / "egg_out" / "relu_small").exists() or not any(
            p.stat().st_mtime > time.time() - 600 for p in (ROOT / "egg_out" / "relu_small").rglob("report.md"))
    finally:
        _stop(proc)


def test_studio_server_runs_the_graph(server, tmp_path, relu_task):
    client = server
    assert [a["graph_id"] for a in client.assistants.search()] == ["egg"]
    thread = client.threads.create()
    settings = {"task_path": relu_task, "evaluator": "compile_only", "profile": "h200", "out_dir": str(tmp_path / "out")}
    nodes = []
    for part in client.runs.stream(thread["thread_id"], "egg", input={"settings": settings}, stream_mode="updates"):
        if part.event == "updates" and isinstance(part.data, dict):
            nodes += list(part.data)
    assert nodes[0] == "analysis" and "algorithm_design" in nodes and nodes[-1] == "finalize"
    state = client.threads.get_state(thread["thread_id"])["values"]
    # readable stage records, not opaque blobs
    assert state["result"]["status"] == "unverified"
    assert state["design"]["decisions"][0]["stage"] == "algorithm_design"
    assert state["attempts"][0]["verdict"] == "compiled_only"
    history = client.threads.get_history(thread["thread_id"], limit=100)
    assert len(history) > 6


def test_studio_review_pause_and_resume(server, tmp_path, relu_task):
    client = server
    thread = client.threads.create()
    settings = {"task_path": relu_task, "evaluator": "compile_only", "profile": "h200", "review": True,
                "out_dir": str(tmp_path / "out")}
    client.runs.wait(thread["thread_id"], "egg", input={"settings": settings})
    st = client.threads.get_state(thread["thread_id"])
    pauses = [i["value"] for t in st["tasks"] for i in t.get("interrupts", [])]
    assert pauses and pauses[0]["stage"] == "algorithm_design" and "Plan:" in pauses[0]["plan"]
    client.runs.wait(thread["thread_id"], "egg", command={"resume": {"action": "approve"}})
    st = client.threads.get_state(thread["thread_id"])
    pauses = [i["value"] for t in st["tasks"] for i in t.get("interrupts", [])]
    assert pauses and pauses[0]["stage"] == "parallel_mapping"
