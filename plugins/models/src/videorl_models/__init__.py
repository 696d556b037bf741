"""videorl-models: a videorl plugin distribution."""

__version__ = "0.1.0"
