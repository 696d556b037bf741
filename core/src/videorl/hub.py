"""Hugging Face Hub ids where a model folder is expected (``model.path``, ``videorl eval run --model``).

An id (``org/name``) that is not a local folder is resolved through ``huggingface_hub`` from the local
cache only (``HF_HOME``/``HF_HUB_CACHE``): nothing is downloaded at run time, so ``HF_HUB_OFFLINE=1``
holds, and a run is reproducible from what the cache holds. A missing snapshot is an error naming the
id and the command that downloads it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from videorl.errors import ConfigError

# org/name as the Hub spells them; a path that starts with ".", "/" or "~" is never an id
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


def is_hub_id(value: str) -> bool:
    """Whether ``value`` reads as a Hub repository id (``org/name``) rather than a path."""
    return bool(_HUB_ID.match(value)) and ".." not in value


def hub_cache() -> Path:
    """The hub cache folder as the environment names it now (huggingface_hub reads it once, on import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def resolve_model(value: str | Path) -> Path:
    """``value`` as a model folder: itself when it exists or is no Hub id, else the cached snapshot."""
    text = str(value)
    path = Path(text).expanduser()
    if path.exists() or not is_hub_id(text):
        return path
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:  # pragma: no cover - huggingface_hub comes with transformers
        raise ConfigError(
            f"{text}: no such folder (a Hub id needs huggingface_hub: pip install huggingface_hub)"
        ) from None
    cache = hub_cache()
    try:
        return Path(snapshot_download(text, cache_dir=cache, local_files_only=True))
    except LocalEntryNotFoundError:
        raise ConfigError(
            f"{text}: no such folder, and the Hub model {text} is not in the Hugging Face cache ({cache}); "
            f"download it first: hf download {text}"
        ) from None
