"""The ``recorder`` engine: generates with the ``hf`` engine and appends one JSON line per ``generate``
and ``update_weights`` call to the file of its engine option ``log`` (none: records nothing).

It shows the parts of an engine plugin: the capabilities it declares (the ones of the engine it
wraps), ``from_spec`` with the options it checks, and the :class:`~videorl.api.RolloutEngine` methods.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from videorl.api import (
    Completion,
    EncodedPrompt,
    EngineSpec,
    HFEngine,
    ModelBackend,
    SamplingParams,
    check_engine_options,
)


class RecorderEngine:
    """The ``hf`` engine, each call recorded."""

    #: what the wrapped engine declares: transformers layout, refreshed in the actor's dtype, can share
    #: the actor's module in one process, runs on the process's device, generates from encoded prompts
    capabilities = HFEngine.capabilities
    #: ``rollout.engine_options`` it takes: ``log`` and the hf engine's
    accepted_options = ("log", *HFEngine.accepted_options)

    def __init__(self, inner: HFEngine, log: Path | None) -> None:
        self.inner, self.log = inner, log

    @classmethod
    def from_spec(cls, backend: ModelBackend, spec: EngineSpec, options: Mapping[str, Any]) -> RecorderEngine:
        check_engine_options(spec.name, options, cls.accepted_options)
        inner = HFEngine.from_spec(backend, spec, {k: v for k, v in options.items() if k != "log"})
        log = options.get("log")
        return cls(inner, Path(str(log)) if log else None)

    def _record(self, **event: Any) -> None:
        if self.log is not None:
            # one short line per write, appended: the processes of a run may share the file
            with self.log.open("a", encoding="utf-8") as f:
                f.write(json.dumps({"pid": os.getpid(), **event}) + "\n")

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        groups = self.inner.generate(prompts, params)
        tokens = sum(len(c.token_ids) for group in groups for c in group)
        self._record(call="generate", prompts=len(prompts), n=params.n, tokens=tokens)
        return groups

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        self.inner.update_weights(state_dict)
        self._record(call="update_weights", tensors=len(state_dict))

    def close(self) -> None:
        self.inner.close()
