"""What a new user tripped on (issue 20), each as a test: flags after the subcommand and every README
command line, a broken reference, a dead LLM endpoint, bad checkpoint files, two resumes of one
thread, one out folder per run, impossible sizes, and the small things (pipes, headers, speed)."""
import re
import shlex
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT
from tests.support import check_thread_lease
from tests.test_cli import egg, one_clear_line

RELU = str(ROOT / "tests" / "tasks" / "relu_small.py")


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    inline = re.findall(r"`(egg [^`]+)`", text)
    lines = [ln.strip() for b in blocks for ln in b.splitlines()] + inline
    return sorted({ln.split(" && ")[-1] for ln in lines if ln.startswith("egg ")})


def test_every_readme_command_parses():
    from graph.cli import parser
    cmds = readme_commands()
    assert len(cmds) >= 8
    for c in cmds:
        c = re.sub(r"\[(--[^\]]*)\]", r"\1", c.replace("...", "x"))  # [--agent x]: an optional flag
        head, *alts = c.split(" / ")  # `--approve / --skip / --edit J`: alternatives, each on the same command
        base = head.rsplit(" --", 1)[0] if alts else head
        for line in [head] + [f"{base} {a}" for a in alts]:
            try:
                parser().parse_args(shlex.split(line)[1:])
            except SystemExit as exc:
                pytest.fail(f"README command does not parse: {line} ({exc})")


def test_global_options_in_either_place(tmp_path):
    from graph.cli import parser
    a = parser().parse_args(["optimize", "t.py", "--checkpoint", "x.sqlite"])
    b = parser().parse_args(["--checkpoint", "x.sqlite", "optimize", "t.py"])
    c = parser().parse_args(["optimize", "t.py"])
    assert a.checkpoint == b.checkpoint == "x.sqlite" and c.checkpoint is None


def _task(tmp_path, name, body):
    p = tmp_path / f"{name}.py"
    p.write_text("import torch\nimport torch.nn as nn\n" + body +
                 "\ndef get_inputs():\n    return [torch.randn(64)]\n")
    return p


@pytest.mark.parametrize("body,says", [
    ("class Model(nn.Module):\n    def forward(self, x):\n        raise RuntimeError('boom in forward')\n"
     "def get_init_inputs():\n    return []\n", "boom in forward"),
    ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n        raise ValueError('bad init')\n"
     "    def forward(self, x):\n        return x\ndef get_init_inputs():\n    return []\n", "bad init"),
    ("class Model(nn.Module):\n    def __init__(self, a, b):\n        super().__init__()\n"
     "    def forward(self, x):\n        return x\ndef get_init_inputs():\n    return [1]\n", "TypeError"),
])
def test_a_broken_reference_fails_the_run_with_file_and_line(tmp_path, body, says):
    t = _task(tmp_path, "broken_ref", body)
    cp = str(tmp_path / "c.sqlite")
    r = egg("--checkpoint", cp, "optimize", str(t), "--thread", "b1", "--out", str(tmp_path / "o"))
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "status: failed  the reference raised" in r.stdout and says in r.stdout, r.stdout
    assert "broken_ref.py:" in r.stdout  # the file and line of the fault
    again = egg("--checkpoint", cp, "resume", "b1")
    assert "status: failed" in again.stdout  # finished: a resume does not run it again
    runs = egg("--checkpoint", cp, "runs")
    assert "failed" in runs.stdout and "THREAD" in runs.stdout.splitlines()[0]


def test_dead_llm_endpoint_is_a_run_level_error(tmp_path):
    r = egg("--checkpoint", str(tmp_path / "c.sqlite"), "optimize", RELU, "--agent", "openai:foo",
            "--llm-base-url", "http://127.0.0.1:9", "--llm-retries", "0", "--llm-timeout", "5", "--out", str(tmp_path / "o"))
    assert r.returncode == 1
    assert "status: failed  LLM call failed (http://127.0.0.1:9)" in r.stdout and "Connection" in r.stdout, r.stdout
    one_clear_line(egg("optimize", RELU, "--llm-retries", "-3"), "--llm-retries must be at least 0")


def test_bad_checkpoint_files_say_what_to_do(tmp_path):
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"\x00garbage" * 1000)
    for cmd in (["runs"], ["optimize", RELU]):
        one_clear_line(egg("--checkpoint", str(junk), *cmd), "junk.sqlite is not a usable SQLite checkpoint file",
                       "--checkpoint")
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    one_clear_line(egg("--checkpoint", str(blocker / "c.sqlite"), "optimize", RELU), "cannot create the folder")


def test_corrupted_checkpoint_is_caught_before_work(tmp_path):
    cp = tmp_path / "c.sqlite"
    r = egg("--checkpoint", str(cp), "optimize", RELU, "--thread", "ok1", "--candidates-per-stage", "1",
            "--out", str(tmp_path / "o"))
    assert r.returncode == 0, r.stderr
    data = bytearray(cp.read_bytes())
    for off in range(4096, len(data), 4096):  # scribble over every page but the header
        data[off + 100: off + 400] = b"\xAB" * 300
    cp.write_bytes(bytes(data))
    r = egg("--checkpoint", str(cp), "optimize", RELU)
    one_clear_line(r, "not a usable SQLite checkpoint file")


def test_two_resumes_of_one_thread(tmp_path):
    """The second resume says who holds the thread instead of running the stages again."""
    check_thread_lease(str(tmp_path / "c.sqlite"), "t9")


def test_one_out_folder_per_run_and_latest(tmp_path):
    out = tmp_path / "o"
    for tid in ("r1", "r2"):
        r = egg("--checkpoint", str(tmp_path / "c.sqlite"), "optimize", RELU, "--thread", tid,
                "--candidates-per-stage", "1", "--out", str(out))
        assert r.returncode == 0, r.stderr
    folder = out / "relu_small"
    assert (folder / "r1" / "report.md").is_file() and (folder / "r2" / "report.md").is_file()
    assert (folder / "latest").resolve() == (folder / "r2").resolve()


def test_served_runs_write_outside_the_project(tmp_path, monkeypatch):
    from nodes.finalize import out_folder
    from state import RunSettings
    monkeypatch.setenv("EGG_OUT_DIR", str(tmp_path / "cache"))
    assert out_folder(RunSettings(task_path="t.py"), "t", "x") == tmp_path / "cache" / "egg_out" / "t" / "x"
    assert out_folder(RunSettings(task_path="t.py", out_dir=str(tmp_path / "o")), "t", "x") == tmp_path / "o" / "t" / "x"


def test_impossible_sizes_fail_before_work(tmp_path):
    t = tmp_path / "huge.py"
    t.write_text("import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.w = nn.Parameter(torch.empty(10**13))\n"
                 "    def forward(self, x):\n        return x * 2\ndef get_inputs():\n    return [torch.randn(10)]\n"
                 "def get_init_inputs():\n    return []\n")
    r = egg("--checkpoint", str(tmp_path / "c.sqlite"), "optimize", str(t), "--out", str(tmp_path / "o"))
    assert r.returncode == 1 and "too large: the task needs 37252.9 GiB" in r.stdout and "140.4 GiB" in r.stdout, r.stdout


def test_small_things(tmp_path):
    cp = str(tmp_path / "c.sqlite")
    assert egg("--checkpoint", cp, "optimize", RELU, "--thread", "s1", "--candidates-per-stage", "1",
               "--out", str(tmp_path / "o")).returncode == 0
    p = subprocess.run(f"{sys.executable} -m graph.cli --checkpoint {cp} history s1 | head -1", shell=True,
                       capture_output=True, text=True, cwd=ROOT)
    assert p.stdout.startswith("thread s1") and "Error" not in p.stderr, p.stderr
    one_clear_line(egg("--checkpoint", cp, "resume", "s1", "--approve"), "has finished")
    hw = egg("hw")
    assert "falls back" in hw.stdout or "compiles for the default h200" in hw.stdout or "detected" in hw.stdout
    t0 = time.perf_counter()
    assert egg("--help").returncode == 0
    assert time.perf_counter() - t0 < 2.0  # nothing heavy imported before parsing
