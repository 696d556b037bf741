"""A backend's ``engine_token_map``: an engine that writes other placeholder ids than the training model
(InternVL in vLLM writes ``<video>`` where transformers scatters at ``<IMG_CONTEXT>``) passes ``models
check`` with the map and fails its ``prompt_ids`` check without it; a malformed map is refused by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from videorl.actor.parity import tolerance_for
from videorl.alignment import check_same_prompt
from videorl.backend import engine_token_map
from videorl.diagnostics.models_check import probe_prompts, run_check
from videorl.errors import AlignmentError, ConfigError
from videorl.generation import Completion, EngineCapabilities, SamplingParams
from videorl.model_inputs import EncodedPrompt
from videorl.plugins import load_plugins
from videorl.rollout.factory import make_engine
from videorl.rollout.vllm_common import completions


def test_the_map_reads_engine_ids_as_training_ids_and_nothing_else() -> None:
    check_same_prompt("s", [1, 9, 9, 2], [1, 5, 5, 2], where="E", engine_token_map={5: 9})
    with pytest.raises(AlignmentError, match=r"position 1: \[5, 5, 2\] vs \[9, 9, 2\]\).*engine_token_map"):
        check_same_prompt("s", [1, 9, 9, 2], [1, 5, 5, 2], where="E")
    with pytest.raises(AlignmentError, match=r"read through the backend's engine_token_map.*position 3"):
        check_same_prompt("s", [1, 9, 9, 2], [1, 5, 5, 3], where="E", engine_token_map={5: 9})


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ([(5, 9)], "must be a mapping"),
        ({5: -1}, "entry 5: -1"),
        ({"5": 9}, "entry '5': 9"),
        ({True: 9}, "entry True: 9"),
        ({9: 9}, "entry 9: 9"),
        (dict.fromkeys(range(2000), 1), "at most 1024"),
    ],
)
def test_a_malformed_map_is_refused_naming_the_backend(mapping: Any, message: str) -> None:
    backend = SimpleNamespace(family="fam", engine_token_map=mapping)
    with pytest.raises(ConfigError, match=f"model backend 'fam': .*{message}"):
        engine_token_map(backend)
    assert engine_token_map(SimpleNamespace(family="fam")) == {}


class RenamingEngine:
    """A vLLM-like engine over the hf engine: it generates from the backend's rollout request and reports
    prompt ids with ``writes`` (training id -> its own id) applied, read back as vLLM's engines read
    them (:func:`~videorl.rollout.vllm_common.completions` with the backend's map)."""

    capabilities = EngineCapabilities(request_format="request")

    def __init__(self, backend: Any, inner: Any, writes: dict[int, int]) -> None:
        self.backend, self.inner, self.writes = backend, inner, writes

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        out = []
        for prompt in prompts:
            request = self.backend.rollout_request(prompt)
            [group] = self.inner.generate([prompt], params)
            output = SimpleNamespace(
                prompt_token_ids=[self.writes.get(t, t) for t in request.prompt_ids],
                outputs=[
                    SimpleNamespace(
                        token_ids=c.token_ids,
                        logprobs=[{t: SimpleNamespace(logprob=p)} for t, p in zip(c.token_ids, c.logprobs)],
                        finish_reason=c.finish_reason,
                    )
                    for c in group
                ],
            )
            out.append(completions(request, output, engine_token_map(self.backend)))
        return out

    def update_weights(self, state_dict: Any) -> None:
        self.inner.update_weights(state_dict)

    def close(self) -> None:
        self.inner.close()


def test_models_check_passes_with_the_map_and_fails_without(tiny_model_dir: Callable[[str], Path]) -> None:
    import torch

    from videorl_models.qwen2_5_vl import Qwen2_5VLBackend

    path = tiny_model_dir("qwen2_5_vl")
    plain: Any = Qwen2_5VLBackend(path)
    video, other = plain.token_ids["video"], plain.tokenizer.get_vocab()["<|vision_pad|>"]

    class Mapped(Qwen2_5VLBackend):
        @property
        def engine_token_map(self) -> dict[int, int]:  # the ids are the checkpoint tokenizer's
            vocab = self.tokenizer.get_vocab()
            return {vocab["<|vision_pad|>"]: vocab["<|video_pad|>"]}

    model = plain.load_model(dtype=torch.float32)
    [prompt] = [p for p in probe_prompts(plain, plain.budget) if p.sample_id == "video-10fps-1.7s"]
    reports = {}
    backends: dict[str, Any] = {"plain": plain, "mapped": Mapped(path)}
    for name, backend in backends.items():
        inner = make_engine(load_plugins(), "hf", backend, model_path=str(path), dtype="float32", seed=0)
        engine = RenamingEngine(backend, inner, {video: other})
        reports[name] = run_check(
            backend, engine, model, engine_name="renaming", dtype="float32",
            tolerance=tolerance_for("float32"), prompts=[prompt], compute_dtype=torch.float32,
        )  # fmt: skip
    checks = {r.check: r for r in reports["plain"].results}
    assert not reports["plain"].ok and checks["prompt_ids"].status == "FAIL"
    assert (
        checks["prompt_ids"].engine == str([other] * 4) and "engine_token_map" in checks["prompt_ids"].cause
    )
    assert reports["mapped"].ok, reports["mapped"].table()
    assert {r.check for r in reports["mapped"].results} >= {"prompt_ids", "grids", "greedy", "logprobs"}
