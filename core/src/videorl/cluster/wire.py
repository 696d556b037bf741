"""What crosses a process boundary in a Ray run: JSON of sample ids, token ids and plain numbers.

Workers load the dataset files and the frame cache themselves, so a sample travels as its id and a
response as its token ids; decoded frames never leave the process that loads them. Anything that is
not a plain JSON value (a tensor, an array, bytes) is refused when the message is written, naming it.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from videorl.media.info import MediaInfo
from videorl.rollout import Completion


class WireError(TypeError):
    """A message held something other than plain values."""


def _refuse(value: Any) -> Any:
    raise WireError(
        f"a {type(value).__module__}.{type(value).__name__} cannot cross a process boundary: Ray workers "
        "exchange sample ids, token ids and plain numbers only (frames are loaded from the cache where "
        "they are used)"
    )


def dumps(message: Any) -> bytes:
    """``message`` (nested dicts, lists, str, int, float, bool, None) as compact JSON bytes."""
    return json.dumps(message, separators=(",", ":"), default=_refuse).encode()


def loads(data: bytes) -> Any:
    return json.loads(data)


def completion_out(c: Completion) -> list[Any]:
    return [c.token_ids, c.logprobs, c.finish_reason]


def completion_in(value: list[Any]) -> Completion:
    ids, logprobs, reason = value
    return Completion([int(i) for i in ids], [float(x) for x in logprobs], str(reason))


def media_out(media: MediaInfo | None) -> dict[str, Any] | None:
    return None if media is None else asdict(media)


def media_in(value: dict[str, Any] | None) -> MediaInfo | None:
    return None if value is None else MediaInfo(**value)
