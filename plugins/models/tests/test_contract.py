"""Every first-party backend keeps the backend contract of ``videorl.testing``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from videorl.plugins import load_plugins
from videorl.testing import assert_backend_contract
from videorl_models.qwen3_vl import Qwen3VLBackend
from videorl_models.tiny import TINY_MODEL_TYPES


@pytest.mark.parametrize("model_type", sorted(TINY_MODEL_TYPES))
def test_backend_contract(model_type: str, tmp_path: Path) -> None:
    backends = load_plugins().model_backends
    backend_class = backends.get(TINY_MODEL_TYPES[model_type])
    backend = assert_backend_contract(backend_class, tmp_path, model_type=model_type)
    assert backend.family == TINY_MODEL_TYPES[model_type]


class _NoDummy:
    dummy, dummy_calls = True, 0

    def remove(self) -> None: ...


def _broken(base: type, **members: object) -> type:
    return type(f"Broken{base.__name__}", (base,), members)


@pytest.mark.parametrize(
    ("members", "error", "match"),
    [
        (
            {"install_vision_sync": lambda self, model: _NoDummy()},
            AssertionError,
            "a text-only forward ran 0 dummies",
        ),
        (
            {
                "rollout_request": lambda self, enc: dataclasses.replace(
                    Qwen3VLBackend.rollout_request(self, enc), multi_modal_data={}
                )
            },
            AssertionError,
            r"batch video: media \{'video': 0, 'image': 0\}",
        ),
        (
            {
                "build_tiny": classmethod(
                    lambda cls, out_dir, *, model_type=None, seed=0: Qwen3VLBackend.build_tiny(out_dir)
                )
            },
            TypeError,
            "width",
        ),
        (
            {"forbidden_token_ids": lambda self: frozenset({10**6})},
            AssertionError,
            "misses padded-vocabulary ids",
        ),
        ({"engine_token_map": {5: 6}}, AssertionError, r"engine_token_map maps .* non-placeholder ids \[6\]"),
    ],
    ids=[
        "no dummy",
        "request drops the video",
        "build_tiny without width",
        "placeholders allowed",
        "a map renames text",
    ],
)
def test_the_contract_catches_a_broken_backend(
    members: dict[str, object], error: type, match: str, tmp_path: Path
) -> None:
    with pytest.raises(error, match=match):
        assert_backend_contract(_broken(Qwen3VLBackend, **members), tmp_path)
