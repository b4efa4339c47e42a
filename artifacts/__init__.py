"""What a run leaves behind: the kernel (.cu), a standalone ModelNew module, a report."""
from artifacts.export import export_run, standalone_module, report_markdown

__all__ = ["export_run", "standalone_module", "report_markdown"]
