"""KernelBench-format tasks: loading, validation and the bundled suite."""
from tasks.loader import LoadedTask, TaskError, load_task, task_spec, SUITE_DIR, find_task_files

__all__ = ["LoadedTask", "TaskError", "load_task", "task_spec", "SUITE_DIR", "find_task_files"]
