"""videorl-benchmarks: benchmark adapters with official scoring (registered in ``plugin.py``)."""

__version__ = "0.1.0"
