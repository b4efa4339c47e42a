"""Parent side of the evaluation worker: spawn, time out, restart.

A candidate that segfaults, faults the CUDA context or hangs costs that
candidate; the next request starts a fresh worker.
"""
from __future__ import annotations

import multiprocessing as mp


class WorkerDied(RuntimeError):
    pass


class WorkerTimeout(RuntimeError):
    pass


class WorkerSetupError(RuntimeError):
    """The worker could not start or load the task: infrastructure, not the candidate."""


class SandboxWorker:
    def __init__(self, task_path: str, setup_timeout: float = 900.0, role: str = "candidate",
                 tolerance: str = "float64", compile_baseline: bool | str = True):
        self.task_path = task_path
        self.role, self.tolerance, self.compile_baseline = role, tolerance, compile_baseline
        self.setup_timeout = setup_timeout
        self.proc = None
        self.conn = None
        self.info: dict = {}
        self.restarts = -1

    def _start(self) -> None:
        from runtime import worker  # imported here so the parent never touches CUDA itself

        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker.main, args=(child,), daemon=True, name="egg-eval-worker")
        self.proc.start()
        child.close()
        self.restarts += 1
        reply = self._roundtrip("setup", self._setup_payload(), self.setup_timeout)
        if not reply.get("ok"):
            self.close()
            raise WorkerSetupError(f"evaluation worker could not set up the task: {reply.get('error')}")
        self.info = reply

    def _setup_payload(self) -> dict:
        return {"task": self.task_path, "role": self.role, "tolerance": self.tolerance, "compile": self.compile_baseline}

    def _roundtrip(self, kind: str, payload, timeout: float) -> dict:
        try:
            self.conn.send((kind, payload))
            if not self.conn.poll(timeout):
                self.kill()
                raise WorkerTimeout(f"no answer in {timeout:.0f} s")
            reply = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as exc:
            code = self.proc.exitcode if self.proc else None
            self.kill()
            raise WorkerDied(f"worker process died (exit code {code})") from exc
        if reply.get("fatal"):  # the worker exits after a CUDA fault; start afresh next time
            self.kill()
        return reply

    def request(self, kind: str, payload, timeout: float) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        return self._roundtrip(kind, payload, timeout)

    def switch(self, task_path: str) -> None:
        """Point a live worker at another task (no new process, no new imports)."""
        if task_path == self.task_path:
            return
        self.task_path = task_path
        if self.proc is None or not self.proc.is_alive():
            return  # the next request starts one for this task
        reply = self._roundtrip("setup", self._setup_payload(), self.setup_timeout)
        if not reply.get("ok"):
            self.kill()
            raise WorkerSetupError(f"evaluation worker could not set up the task: {reply.get('error')}")
        self.info = reply

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        self.kill()
