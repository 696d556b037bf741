"""videorl: reinforcement learning with verifiable rewards for video-language models.

The public API for plugin authors is :mod:`videorl.api` plus ``videorl.hookimpl``. Importing
``videorl`` is cheap: it imports neither torch nor vllm.
"""

from videorl.hookspecs import hookimpl

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl"]
