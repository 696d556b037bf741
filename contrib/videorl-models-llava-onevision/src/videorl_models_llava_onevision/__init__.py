"""videorl-models-llava-onevision: a LLaVA-OneVision model backend for videorl (contrib)."""

__version__ = "0.1.0"
