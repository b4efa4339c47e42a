"""KernelBench-format tasks: loading, validation and the bundled suite."""
from tasks.loader import (LoadedTask, TaskError, load_task, task_spec, SUITE_DIR, find_task_files, file_sha256,
                          materialize, tensor_attribute)

__all__ = ["LoadedTask", "TaskError", "load_task", "task_spec", "SUITE_DIR", "find_task_files", "file_sha256",
           "materialize", "tensor_attribute"]
