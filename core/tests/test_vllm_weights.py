"""The in-memory weight refresh of vLLM engines (:mod:`videorl.rollout.vllm_weights`) without vLLM:
buckets, the byte packing the worker processes receive, and the begin/load/finish protocol against a
fake engine."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from videorl.rollout.vllm_weights import (
    ALIGN,
    buckets,
    choose_transport,
    decode_bytes,
    encode_bytes,
    layout,
    push_weights,
)


def _named(*sizes: int) -> list[tuple[str, torch.Tensor]]:
    """float32 tensors of ``sizes`` elements (4 bytes each), named t0, t1, ..."""
    return [(f"t{i}", torch.arange(n, dtype=torch.float32) + i) for i, n in enumerate(sizes)]


def test_buckets_group_tensors_up_to_the_size_each_aligned() -> None:
    assert ALIGN == 16
    # 10 floats = 40 bytes -> 48 aligned; 25 floats = 100 -> 112; 4 floats = 16 -> 16
    named = _named(10, 10, 25, 4, 4)
    groups = [[name for name, _ in g] for g in buckets(named, bucket_bytes=100)]
    # 48 + 48 = 96 fits in 100, +112 does not; 112 alone exceeds 100 but is a bucket of its own;
    # 16 + 16 = 32
    assert groups == [["t0", "t1"], ["t2"], ["t3", "t4"]]
    assert [[n for n, _ in g] for g in buckets(named, bucket_bytes=1 << 20)] == [
        ["t0", "t1", "t2", "t3", "t4"]
    ]
    assert list(buckets([], bucket_bytes=10)) == []
    with pytest.raises(ValueError, match="bucket_bytes"):
        list(buckets(named, bucket_bytes=0))


def test_layout_offsets_are_aligned_running_sums() -> None:
    meta = layout(_named(10, 1, 25))
    assert meta["offsets"] == [0, 48, 64]  # 40 -> 48, 4 -> 16
    assert meta["total"] == 64 + 112
    assert meta["dtypes"] == ["float32"] * 3 and meta["shapes"] == [[10], [1], [25]]


def test_bytes_round_trip_keeps_every_dtype_shape_and_value() -> None:
    gen = torch.Generator().manual_seed(0)
    group = [
        ("w.bf16", torch.randn(3, 5, generator=gen).to(torch.bfloat16)),
        ("w.f32", torch.randn(2, 3, 4, generator=gen)),
        ("w.f16.t", torch.randn(4, 3, generator=gen).to(torch.float16).t()),  # not contiguous
        ("steps", torch.tensor([7, -1], dtype=torch.int64)),
        ("scalar", torch.tensor(2.5)),
        ("empty", torch.empty(0, 3)),
        ("mask", torch.tensor([True, False, True])),
    ]
    payload = encode_bytes(group)
    assert payload["kind"] == "bytes" and isinstance(payload["data"], bytearray)
    assert len(payload["data"]) == payload["total"]
    decoded = decode_bytes({**payload, "data": bytes(payload["data"])})  # what a worker receives
    assert [n for n, _ in decoded] == [n for n, _ in group]
    for (_, want), (_, got) in zip(group, decoded):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


def test_a_bytes_payload_is_plain_data_that_vllms_message_encoding_carries() -> None:
    msgspec = pytest.importorskip("msgspec")
    payload = encode_bytes(_named(3, 300))
    wire = msgspec.msgpack.decode(msgspec.msgpack.encode(payload))  # what collective_rpc does to it
    decoded = decode_bytes(wire)
    assert torch.equal(decoded[1][1], torch.arange(300, dtype=torch.float32) + 1)


class _FakeEngine:
    """A ``collective_rpc`` with two workers that rebuild what they receive, as WeightReceiver does."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool, bool]] = []
        self.loaded: list[dict[str, torch.Tensor]] = [{}, {}]

    def __call__(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        (payload,) = args
        self.calls.append((method, payload["begin"], payload["end"]))
        tensors = payload["tensors"] if payload["kind"] == "direct" else decode_bytes(payload)
        for worker in self.loaded:
            worker.update({name: t.clone() for name, t in tensors})
        return [None, None]


def test_push_weights_sends_each_bucket_the_first_begins_the_last_ends() -> None:
    state = dict(_named(10, 10, 25, 4))
    engine = _FakeEngine()
    sent = push_weights(engine, state.items(), transport="bytes", bucket_bytes=100)
    assert sent == 3  # [t0 t1] [t2] [t3], as in the bucketing test
    load = "videorl_load_weight_bucket"
    assert engine.calls == [(load, True, False), (load, False, False), (load, False, True)]
    for worker in engine.loaded:
        assert worker.keys() == state.keys()
        assert all(torch.equal(worker[k], v) for k, v in state.items())


def test_in_one_process_the_tensors_themselves_go_in_one_bucket() -> None:
    state = dict(_named(10, 10, 25, 4))
    engine = _FakeEngine()
    assert push_weights(engine, state.items(), transport="direct", bucket_bytes=100) == 1
    assert engine.calls == [("videorl_load_weight_bucket", True, True)]
    assert all(torch.equal(engine.loaded[0][k], v) for k, v in state.items())


def test_one_bucket_begins_and_ends_the_update_and_no_tensors_still_make_one() -> None:
    engine = _FakeEngine()
    assert push_weights(engine, _named(4), transport="bytes", bucket_bytes=1 << 20) == 1
    assert push_weights(engine, [], transport="bytes", bucket_bytes=1 << 20) == 1
    assert engine.calls == [("videorl_load_weight_bucket", True, True)] * 2


def test_the_transport_follows_where_the_workers_run() -> None:
    assert choose_transport(same_process=True, engine_on_cuda=True) == "direct"
    assert choose_transport(same_process=True, engine_on_cuda=False) == "direct"
    assert choose_transport(same_process=False, engine_on_cuda=False) == "bytes"
    # a GPU engine gets CUDA IPC handles only from a process that has CUDA itself
    expected = "cuda_ipc" if torch.cuda.is_available() else "bytes"
    assert choose_transport(same_process=False, engine_on_cuda=True) == expected


def _open_in_child(handle: dict[str, Any], meta: dict[str, Any], out: Any) -> None:
    """In another process, as a vLLM worker does: map the staging buffer, unpack, clone, report."""
    from videorl.rollout.vllm_weights import open_ipc_handle, unpack

    tensors = [(n, t.clone()) for n, t in unpack(open_ipc_handle(handle), meta)]
    torch.cuda.synchronize()
    out.put([(n, t.cpu().tolist()) for n, t in tensors])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA IPC needs a GPU")
@pytest.mark.parametrize("source", ["cpu", "cuda"], ids=["from-host", "gathered-on-the-gpu"])
def test_a_cuda_ipc_bucket_reaches_another_process(source: str) -> None:
    """Tensors on the host (an engine fed host weights) or on the GPU (the FSDP gather a CUDA IPC
    refresh streams, :func:`videorl.actor.policy.refresh_engine`) reach the other process alike."""
    import multiprocessing

    from videorl.rollout.vllm_weights import _Staging

    group = [("a", torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)), ("b", torch.tensor([1.5, -2.0]))]
    group = [(name, tensor.to(source)) for name, tensor in group]
    staging = _Staging(1 << 20)
    payload = staging.payload(group)
    assert payload["kind"] == "cuda_ipc" and isinstance(payload["handle"]["handle"], bytes)
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    child = context.Process(target=_open_in_child, args=(payload["handle"], payload, out))
    child.start()
    received = out.get(timeout=120)
    child.join(timeout=60)
    assert received == [("a", [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]), ("b", [1.5, -2.0])]


# --- the receiving side: a failure on either side never leaves a worker half in reload ---------------


class _ReloadingModel:
    """A vLLM model under the fake layerwise reload: ``load_weights`` outside a reload is an error."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.fail_on = fail_on
        self.in_reload = False
        self.events: list[str] = []
        self.weights: dict[str, torch.Tensor] = {}

    def load_weights(self, named: list[tuple[str, torch.Tensor]]) -> None:
        assert self.in_reload, "loaded outside a layerwise reload"
        for name, tensor in named:
            if name == self.fail_on:
                raise ValueError(f"no parameter {name}")
            self.weights[name] = tensor.clone()


def _fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The three vLLM functions WeightReceiver calls, recording on the model."""
    import contextlib
    import sys
    import types

    def initialize(model: _ReloadingModel) -> None:
        assert not model.in_reload, "a reload began inside another"
        model.in_reload = True
        model.events.append("begin")

    def finalize(model: _ReloadingModel, model_config: Any) -> None:
        assert model.in_reload, "finalised outside a reload"
        model.in_reload = False
        model.events.append("finish")

    reload = types.ModuleType("vllm.model_executor.model_loader.reload")
    reload.initialize_layerwise_reload = initialize  # type: ignore[attr-defined]
    reload.finalize_layerwise_reload = finalize  # type: ignore[attr-defined]
    config = types.ModuleType("vllm.config")
    config.set_current_vllm_config = lambda _: contextlib.nullcontext()  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.model_executor", "vllm.model_executor.model_loader"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.config", config)
    monkeypatch.setitem(sys.modules, "vllm.model_executor.model_loader.reload", reload)


class _Workers:
    """``collective_rpc`` over real :class:`WeightReceiver` workers holding fake models."""

    def __init__(self, *models: _ReloadingModel) -> None:
        from types import SimpleNamespace

        from videorl.rollout.vllm_weights import WeightReceiver

        self.models = models
        self.kinds: list[str] = []
        self.workers = []
        for model in models:
            worker = WeightReceiver()
            worker.vllm_config = SimpleNamespace(model_config=None)
            worker.model_runner = SimpleNamespace(
                get_model=lambda m=model: m,
                reset_lora_state=lambda: None,
                reset_encoder_cache=lambda: None,
                reset_mm_cache=lambda: None,
            )
            self.workers.append(worker)

    def __call__(self, method: str, args: tuple[Any, ...] = ()) -> list[Any]:
        self.kinds.append(args[0]["kind"])
        out, failure = [], None
        for worker in self.workers:  # as collective_rpc: every worker runs, then the first error raises
            try:
                out.append(getattr(worker, method)(*args))
            except Exception as exc:
                failure = failure or exc
        if failure is not None:
            raise failure
        return out


def test_a_sender_failure_after_the_first_bucket_has_the_workers_finish_their_reload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import videorl.rollout.vllm_weights as vw

    _fake_vllm(monkeypatch)
    encoded: list[int] = []

    def encode_or_run_out(group: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
        encoded.append(len(group))
        if len(encoded) == 2:
            raise MemoryError("no host memory for bucket 2")
        return encode_bytes(group)

    monkeypatch.setattr(vw, "encode_bytes", encode_or_run_out)
    workers = _Workers(_ReloadingModel(), _ReloadingModel())
    with pytest.raises(MemoryError, match="bucket 2"):
        push_weights(workers, _named(10, 10, 25, 4), transport="bytes", bucket_bytes=100)
    assert workers.kinds == ["bytes", "abort"]
    for model in workers.models:
        assert model.events == ["begin", "finish"] and not model.in_reload
        assert sorted(model.weights) == ["t0", "t1"]  # bucket 1 only
    # the next refresh starts a fresh reload on every worker
    monkeypatch.setattr(vw, "encode_bytes", encode_bytes)
    assert push_weights(workers, _named(10, 10, 25, 4), transport="bytes", bucket_bytes=100) == 3
    assert all(m.events == ["begin", "finish"] * 2 for m in workers.models)


def test_a_worker_whose_load_failed_finishes_once_and_the_others_finish_on_the_abort(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_vllm(monkeypatch)
    workers = _Workers(_ReloadingModel(fail_on="t2"), _ReloadingModel())
    with pytest.raises(ValueError, match="no parameter t2"):
        push_weights(workers, _named(10, 10, 25, 4), transport="bytes", bucket_bytes=100)
    assert workers.kinds == ["bytes", "bytes", "abort"]  # bucket 2 failed on worker 0 only
    for model in workers.models:
        assert model.events == ["begin", "finish"] and not model.in_reload
    assert sorted(workers.models[1].weights) == ["t0", "t1", "t2"]


def test_an_update_that_fails_before_any_bucket_went_out_sends_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import videorl.rollout.vllm_weights as vw

    _fake_vllm(monkeypatch)

    def no_memory(group: Any) -> dict[str, Any]:
        raise MemoryError("no host memory for bucket 1")

    monkeypatch.setattr(vw, "encode_bytes", no_memory)
    workers = _Workers(_ReloadingModel())
    with pytest.raises(MemoryError):
        push_weights(workers, _named(10), transport="bytes", bucket_bytes=100)
    assert workers.kinds == [] and workers.models[0].events == []
