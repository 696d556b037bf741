"""Pixel uploads: through pinned host memory without blocking on CUDA, plain copies elsewhere.

No GPU here: ``torch.cuda.is_available`` and the tensor methods are replaced by recorders, so the
test checks the path :meth:`ModelInputs.to` takes, not a transfer."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from videorl.model_inputs import ModelInputs, pinned_upload


def _inputs() -> ModelInputs:
    return ModelInputs(
        sample_ids=["a"],
        input_ids=torch.ones(1, 6, dtype=torch.long),
        attention_mask=torch.ones(1, 6, dtype=torch.long),
        pixel_values_videos=torch.rand(8, 12),
        video_grid_thw=torch.tensor([[2, 2, 2]]),
        second_per_grid_ts=torch.tensor([1.0]),
        extra={"deepstack": torch.rand(2, 3)},
    )


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, Any, bool]]:
    """``(kind, device, dtype, non_blocking)`` for each ``pin_memory`` and ``to`` call on a tensor."""
    calls: list[tuple[str, Any, Any, bool]] = []

    def pin_memory(self: torch.Tensor) -> torch.Tensor:
        calls.append(("pin", None, self.dtype, False))
        return self

    def to(self: torch.Tensor, *, device: Any = None, dtype: Any = None, non_blocking: bool = False) -> Any:
        calls.append(("to", device, dtype, non_blocking))
        return self

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    return calls


def test_cuda_uploads_are_pinned_and_non_blocking(
    monkeypatch: pytest.MonkeyPatch, recorded: list[tuple[str, Any, Any, bool]]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert pinned_upload("cuda:3") and pinned_upload(torch.device("cuda", 0))
    _inputs().to(device="cuda:3", dtype=torch.bfloat16)
    tensors = 6  # input_ids, attention_mask, pixels, grid, seconds, the extra tensor
    assert [c[0] for c in recorded] == ["pin", "to"] * tensors
    uploads = [c for c in recorded if c[0] == "to"]
    assert all(device == "cuda:3" and non_blocking for _, device, _, non_blocking in uploads)
    # floating inputs cast to the compute dtype, times kept in float32, integers left alone
    assert [dtype for _, _, dtype, _ in uploads] == [
        None,
        None,
        torch.bfloat16,
        None,
        torch.float32,
        torch.bfloat16,
    ]


def test_cpu_and_cuda_less_hosts_copy_plainly(
    monkeypatch: pytest.MonkeyPatch, recorded: list[tuple[str, Any, Any, bool]]
) -> None:
    _inputs().to(device="cpu", dtype=torch.bfloat16)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not pinned_upload("cuda") and not pinned_upload(None)
    _inputs().to(device="cuda", dtype=torch.bfloat16)
    assert recorded and all(kind == "to" and not non_blocking for kind, _, _, non_blocking in recorded)


def test_the_copy_keeps_values_and_dtypes_on_cpu() -> None:
    inputs = _inputs()
    moved = inputs.to(device="cpu", dtype=torch.bfloat16)
    assert moved.pixel_values_videos is not None and moved.pixel_values_videos.dtype == torch.bfloat16
    assert moved.second_per_grid_ts is not None and moved.second_per_grid_ts.dtype == torch.float32
    assert moved.extra["deepstack"].dtype == torch.bfloat16 and moved.input_ids.dtype == torch.long
    assert torch.equal(moved.input_ids, inputs.input_ids)
