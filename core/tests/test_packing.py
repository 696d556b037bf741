"""Packed micro-batches (``actor.padding_free``): the row layout, the padded fallback, and the update.

A toy model whose logits depend on the token and its position counter (``position_ids[0]``, or the
count of real tokens before it when padded) gives the same numbers packed and padded only when each
packed sequence's counter restarts at 0 — what transformers' packed-sequence support reads the
boundaries from. The six real families are checked in plugins/models/tests/test_packing.py.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from videorl.actor.policy import Actor
from videorl.actor.update import update
from videorl.config import TrainConfig, load_config
from videorl.data import Sample
from videorl.encoding import Prompt
from videorl.episode import Episode
from videorl.model_inputs import EncodedPrompt, ModelInputs, PromptInput, collate_encoded, response_stats
from videorl.packed_attention import packed_lengths
from videorl.packing import PackedInputs, pack_for_backend, pack_model_inputs
from videorl.parallel import Parallel
from videorl.rollout import Completion
from videorl.timing import StageTimer

VOCAB = 13


def encoded(sid: str, ids: list[int]) -> EncodedPrompt:
    return EncodedPrompt(sid, ids, [0] * len(ids), {}, ids, PromptInput(sid, "q"))


def two_rows() -> ModelInputs:
    """Prompt [1, 2, 3] + response [4, 5]; prompt [7] + response [8, 9, 10]: a 2 × 6 padded batch."""
    return collate_encoded(
        [encoded("a", [1, 2, 3]), encoded("b", [7])], pad_token_id=0, responses=[[4, 5], [8, 9, 10]]
    )


def test_a_packed_row_holds_the_real_tokens_with_restarting_counters() -> None:
    inputs = two_rows()
    assert inputs.input_ids.tolist() == [[1, 2, 3, 4, 5, 0], [0, 0, 7, 8, 9, 10]]
    positions = torch.arange(12).reshape(1, 2, 6) * 10  # a family's own positions, one axis
    packed = pack_model_inputs(inputs, positions)
    assert packed.input_ids.tolist() == [[1, 2, 3, 4, 5, 7, 8, 9, 10]]
    assert packed_lengths(packed.position_ids[0]) == [5, 4]
    assert packed.position_ids.shape == (2, 1, 9)
    assert packed.position_ids[0, 0].tolist() == [0, 1, 2, 3, 4, 0, 1, 2, 3]
    assert packed.position_ids[1, 0].tolist() == [0, 10, 20, 30, 40, 80, 90, 100, 110]
    assert packed.mm_token_type_ids is not None and packed.mm_token_type_ids.tolist() == [[0] * 9]
    # token 3 (index 2) predicts 4, 4 predicts 5; 7 (index 5) predicts 8, 8 predicts 9, 9 predicts 10
    assert packed.logits_index.tolist() == [2, 3, 5, 6, 7]
    assert packed.targets.tolist() == [[4, 5, 8, 9, 10]]
    kwargs = packed.model_kwargs()
    assert "attention_mask" not in kwargs and kwargs["position_ids"] is packed.position_ids


def test_without_family_positions_the_counters_are_the_positions() -> None:
    packed = pack_model_inputs(two_rows())
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3]]


class CounterModel(torch.nn.Module):
    """Logits from the token and its position counter; the HF conventions of ``logits_to_keep``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.position = torch.nn.Embedding(16, 8)
        self.head = torch.nn.Linear(8, VOCAB)
        self.shapes: list[tuple[int, ...]] = []

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        mm_token_type_ids: torch.Tensor | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        use_cache: bool | None = None,
    ) -> Any:
        self.shapes.append(tuple(input_ids.shape))
        if position_ids is None:
            assert attention_mask is not None
            counters = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        else:
            assert attention_mask is None  # packed: the counters carry the boundaries
            counters = position_ids.reshape(-1, *input_ids.shape)[0]
        logits = self.head(torch.tanh(self.embed(input_ids) + self.position(counters)))
        if isinstance(logits_to_keep, torch.Tensor):
            return SimpleNamespace(logits=logits[:, logits_to_keep])
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


class PaddingBackend:
    family = "padding_only"

    def forbidden_token_ids(self) -> set[int]:
        return set()

    def collate(
        self, encoded: Sequence[EncodedPrompt], responses: Sequence[Sequence[int]] | None = None
    ) -> ModelInputs:
        return collate_encoded(encoded, pad_token_id=0, responses=responses)


class PackingBackend(PaddingBackend):
    family = "packing"

    def pack_inputs(self, inputs: ModelInputs) -> PackedInputs:
        return pack_model_inputs(inputs)


def test_packed_stats_equal_the_padded_ones_in_the_padded_layout() -> None:
    inputs, model = two_rows(), CounterModel()
    padded = response_stats(
        model(**inputs.model_kwargs(), logits_to_keep=inputs.logits_to_keep).logits, inputs
    )
    packed_inputs = pack_model_inputs(inputs)
    out = model(**packed_inputs.model_kwargs(), logits_to_keep=packed_inputs.logits_index)
    packed = packed_inputs.response_stats(out.logits)
    assert model.shapes == [(2, 6), (1, 9)]
    mask = inputs.response_mask
    assert mask is not None and mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    for want, got in zip(padded, packed):
        torch.testing.assert_close(got[mask.bool()], want[mask.bool()], atol=1e-6, rtol=0)
        assert got[0, 2] == 0  # off the responses
    # the whole row's logits (a model without logits_to_keep) give the same
    whole = packed_inputs.response_stats(model(**packed_inputs.model_kwargs()).logits)
    torch.testing.assert_close(whole[0], packed[0])


def test_the_packed_check_can_fail() -> None:
    inputs, model = two_rows(), CounterModel()
    padded = response_stats(
        model(**inputs.model_kwargs(), logits_to_keep=inputs.logits_to_keep).logits, inputs
    )
    packed = pack_model_inputs(inputs)
    packed.position_ids = torch.arange(9).unsqueeze(0)  # one sequence: no boundary
    joined = packed.response_stats(model(**packed.model_kwargs(), logits_to_keep=packed.logits_index).logits)
    assert (joined[0] - padded[0])[1].abs().max() > 1e-3


def test_a_backend_that_cannot_pack_is_padded_and_says_why_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="videorl.packing")
    assert pack_for_backend(PaddingBackend(), two_rows()) is None
    assert pack_for_backend(PaddingBackend(), two_rows()) is None
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1
    assert "padding_only backend cannot pack" in messages[0] and "no pack_inputs()" in messages[0]
    assert "actor.padding_free=false" in messages[0]

    class Declined(PackingBackend):
        family = "declined"
        packing_unsupported = "its recurrent layers carry state across the row"

    assert pack_for_backend(Declined(), two_rows()) is None
    assert "recurrent layers carry state" in caplog.records[-1].getMessage()
    assert isinstance(pack_for_backend(PackingBackend(), two_rows()), PackedInputs)


def config(*overrides: str) -> TrainConfig:
    return load_config(None, ["model.path=/m", "data.train_files=[/d.jsonl]", "rollout.n=2",
                              "optim.grad_clip=null", *overrides])  # fmt: skip


def trajectory(sid: str, prompt: list[int], response: list[int], advantage: float) -> Episode:
    sample = Sample(id=sid, data_type="text", problem="q", problem_type="fake", ground_truth="1")
    completion = Completion(response, [-1.5] * len(response), "stop")
    return Episode(Prompt(sample, encoded(sid, prompt), None), 0, completion, advantage=advantage)


def batch() -> list[Episode]:
    """Two groups of two whose lengths vary 4× (3 to 12 tokens)."""
    return [
        trajectory("a", [1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12], 1.0),
        trajectory("a", [1, 2, 3, 4, 5, 6, 7], [3], -1.0),
        trajectory("b", [7], [8, 9], 0.5),
        trajectory("b", [7], [1, 1, 1, 2, 2], -0.5),
    ]


def test_the_update_is_the_same_packed_and_padded() -> None:
    """Two optimizer steps (the second with ratios off 1), KL to a reference copy and the entropy bonus."""
    results = []
    for padding_free in (True, False):
        model = CounterModel()
        reference = CounterModel()
        actor = Actor(
            model, torch.optim.SGD(model.parameters(), lr=0.5), PackingBackend(), reference=reference
        )  # type: ignore[arg-type]
        cfg = config(
            f"actor.padding_free={str(padding_free).lower()}",
            "data.rollout_batch_size=2",
            "actor.global_batch_size=1",
            "algorithm.use_kl_loss=true",
            "algorithm.entropy_coef=0.01",
        )
        metrics = update(cfg, actor, built(cfg), batch(), Parallel(), StageTimer())
        rows = {shape[0] for shape in model.shapes}
        assert rows == ({1} if padding_free else {2, 4})  # packed: one row per micro-batch
        results.append((metrics, torch.cat([p.detach().flatten() for p in model.parameters()])))
    (packed, packed_weights), (padded, padded_weights) = results
    for key in ("actor/loss", "actor/kl", "actor/entropy", "actor/grad_norm", "actor/clip_fraction"):
        assert packed[key] == pytest.approx(padded[key], abs=1e-6), key
    torch.testing.assert_close(packed_weights, padded_weights, atol=1e-6, rtol=0)
    assert not torch.equal(
        packed_weights, torch.cat([p.detach().flatten() for p in CounterModel().parameters()])
    )


def test_packed_lengths_are_cached_per_tensor_without_keeping_it_alive() -> None:
    import gc
    import weakref

    counters = torch.tensor([[0, 1, 2, 0, 1]])
    assert packed_lengths(counters) == [3, 2]
    assert packed_lengths(counters) == [3, 2]  # the next layer: the cached lengths
    counters[0, 3] = 3  # changed in place: one sequence now, not a stale [3, 2]
    assert packed_lengths(counters) is None
    alive = weakref.ref(counters)
    del counters
    gc.collect()
    assert alive() is None  # the cache holds no reference to the row's position ids
    assert packed_lengths(torch.tensor([0, 1, 0, 1, 2])) == [2, 3]


def test_packing_a_device_batch_reads_nothing_back_from_the_device() -> None:
    """The indices come from the token counts the batch was collated with: packed on the meta device
    (whose tensors hold no values: any read back raises), the row has the CPU packing's layout, and
    the attention finds its sequence lengths without reading the counters."""
    cpu = pack_model_inputs(two_rows(), torch.arange(12).reshape(1, 2, 6) * 10)
    inputs = two_rows().to(device="meta")
    assert inputs.lengths == ((3, 2), (1, 3))
    with pytest.raises(NotImplementedError, match="meta tensor"):
        inputs.attention_mask.tolist()  # what the packing used to do on the device, once per forward
    packed = pack_model_inputs(inputs, torch.zeros(1, 2, 6, dtype=torch.long, device="meta"))
    assert packed.input_ids.device.type == "meta"
    for name in ("input_ids", "position_ids", "logits_index", "targets"):
        assert getattr(packed, name).shape == getattr(cpu, name).shape, name
    assert packed_lengths(packed.position_ids[0]) == [5, 4]  # the model's view of the counters row
    assert packed_lengths(packed.position_ids) == [5, 4]


def test_packed_sdpa_attends_within_each_sequence_only() -> None:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from videorl.packed_attention import _packed_sdpa, _packed_sdpa_mask

    torch.manual_seed(0)
    module = torch.nn.Module()  # what the attention functions read of it: nothing but is_causal
    counters = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])
    assert packed_lengths(counters) == [3, 2, 4]
    assert packed_lengths(torch.arange(9).unsqueeze(0)) is None  # one sequence
    q, k, v = (torch.randn(1, 2, 9, 4) for _ in range(3))
    out, _ = _packed_sdpa(module, q, k, v, None, position_ids=counters)
    # the reference: a hand-built block-diagonal causal mask over the whole row
    seq = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])
    block = (seq[:, None] == seq[None, :]) & torch.ones(9, 9, dtype=torch.bool).tril()
    want, _ = sdpa_attention_forward(module, q, k, v, block[None, None])
    torch.testing.assert_close(out, want)
    # without boundaries it is plain causal sdpa
    plain, _ = _packed_sdpa(module, q, k, v, None, position_ids=torch.arange(9).unsqueeze(0))
    assert not torch.allclose(plain, want)
    # no mask for an unpadded row (the function applies causality); padding keeps sdpa's mask
    shape = {"batch_size": 1, "q_length": 9, "kv_length": 9, "q_offset": 0, "kv_offset": 0}
    assert _packed_sdpa_mask(**shape, attention_mask=None) is None
    padding = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    mask = _packed_sdpa_mask(**shape, attention_mask=padding, allow_is_causal_skip=True)
    assert mask is not None and not bool(mask[0, 0, 5, 0]) and bool(mask[0, 0, 5, 1])


def built(cfg: Any) -> Any:
    """The run's algorithm, as the composition root builds it once (installed plugins)."""
    from videorl import algorithms
    from videorl.plugins import load_plugins

    return algorithms.build(cfg.algorithm, load_plugins())
