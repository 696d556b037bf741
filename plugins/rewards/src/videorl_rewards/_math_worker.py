"""The math-verify worker process: JSON lines in (``{"gold", "pred"}``), JSON lines out (``{"result"}``).

Run by :mod:`videorl_rewards.mathematics` as ``python -m videorl_rewards._math_worker SECONDS``, which
kills it when an answer makes sympy hang. ``SECONDS`` > 0 also enables math-verify's own (signal-based)
timeouts, which end most hangs without a restart.
"""

from __future__ import annotations

import functools
import json
import os
import sys

_DELIMITERS = ("$", "\\(", "\\[", "\\boxed")


def _wrap(text: str) -> str:
    return text if any(d in text for d in _DELIMITERS) else f"${text}$"


def main() -> None:
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    limit = seconds if seconds > 0 else None
    from math_verify import parse as parse_text
    from math_verify import verify

    @functools.lru_cache(maxsize=2048)  # a group's n responses share the gold, and often the answer
    def parse(text: str) -> tuple[object, ...]:
        return tuple(parse_text(_wrap(text), parsing_timeout=limit))

    # replies go to a descriptor of their own: anything else printed while parsing an answer (sympy and
    # math-verify warnings) lands on stderr, not in the reply stream
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    replies.write('{"ready": true}\n')
    for line in sys.stdin:
        try:
            request = json.loads(line)
            gold, pred = parse(request["gold"]), parse(request["pred"])
            same = bool(gold) and bool(pred) and bool(verify(list(gold), list(pred), timeout_seconds=limit))
            reply: dict[str, object] = {"result": same}
        except Exception as exc:  # a failure on one answer is that answer's failure
            reply = {"result": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        replies.write(json.dumps(reply) + "\n")


if __name__ == "__main__":
    main()
