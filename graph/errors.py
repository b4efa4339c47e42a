"""Errors the CLI reports in one line (kept apart so `egg --help` imports nothing heavy)."""


class UnknownThreadError(KeyError):
    def __str__(self) -> str:
        return f"unknown thread {self.args[0]!r} (see `egg runs`)"


class ThreadBusyError(RuntimeError):
    """Another process is running this thread (a lease is held)."""


class CheckpointError(RuntimeError):
    """The checkpoint store cannot be opened or written; the message names it and what to do."""
