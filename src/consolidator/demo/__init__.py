"""The local end-to-end demo (``consolidator demo`` / ``make demo``). See :mod:`.runner`."""

from consolidator.demo.runner import DemoConfig, DemoError, DemoResult, run_demo

__all__ = ["DemoConfig", "DemoError", "DemoResult", "run_demo"]
