"""What the vLLM engines (:mod:`videorl.rollout.vllm` and :mod:`videorl.rollout.vllm_async`) share: the
environment defaults, the engine options that make vLLM's log-probs the training forward's, the
suppression of forbidden ids, the translation of :class:`SamplingParams`, the conversion of vLLM's
outputs into :class:`Completion`\\ s, and the model folder weights are refreshed from.

Importing this module does not import vLLM.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from videorl.alignment import check_same_prompt
from videorl.errors import ConfigError
from videorl.generation import Completion, EngineSpec, SamplingParams
from videorl.runs.export import export_hf_model

if TYPE_CHECKING:
    from videorl.backend import ModelBackend
    from videorl.model_inputs import RolloutRequest

#: the logit bias of a forbidden id: vLLM clamps biases to [-100, 100], and -100 makes a token's
#: probability e^-100 of the others'
SUPPRESS = -100.0


#: vLLM's share of each GPU when ``rollout.engine_options.gpu_memory_utilization`` is not set: a
#: colocated engine sleeps during the update (its share is free then), and a 7-8B video rollout at
#: 0.7 holds about 12 groups of n=8 in its KV cache against 8 at 0.6; a colocated run whose actor
#: does not fit beside it is told by ``videorl plan`` what to set.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.7


def default_environment() -> None:
    """Defaults for vLLM's environment variables (set before vLLM is imported; the user's win)."""
    os.environ.setdefault(
        "VLLM_CPU_KVCACHE_SPACE", "1"
    )  # GiB; vLLM's CPU default (4+) is far too big for tests
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def platform_defaults(platform: Any) -> dict[str, bool]:
    """Engine defaults of a vLLM platform (``vllm.platforms.current_platform``).

    On GPUs: CUDA graphs (``enforce_eager=False``; eager decoding is 1.5-2.5x slower) and sleep mode,
    so that a colocated engine frees its weights and KV cache while the actor updates. On CPU: eager
    (compiling doubles the start-up and buys nothing in tests) and no sleep mode (vLLM refuses it)."""
    sleep = bool(platform.is_sleep_mode_available())
    return {"enforce_eager": bool(platform.is_cpu()), "enable_sleep_mode": sleep}


#: torchrun's variables: an engine's processes form a world of their own (vLLM's executor sets up its
#: own process group), and must not read the training job's rank, world size or rendezvous.
_LAUNCHER_VARIABLES = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "GROUP_WORLD_SIZE",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)


@contextmanager
def engine_process_environment(visible_devices: str | None) -> Iterator[None]:
    """While vLLM starts its engine processes (they inherit this environment): only
    ``visible_devices`` visible, torchrun's variables removed; restored afterwards.

    ``None`` changes nothing. The training process has initialised CUDA already, so its own devices
    do not change. vLLM's in-process mode (``VLLM_ENABLE_V1_MULTIPROCESSING=0``) would run the engine
    on this process's devices and in its process group, so it is refused here."""
    if visible_devices is None:
        yield
        return
    if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
        raise ConfigError(
            "VLLM_ENABLE_V1_MULTIPROCESSING=0 runs vLLM inside each training process, on its devices and in "
            "its process group; under torchrun on GPUs leave it unset (the engine then runs in processes "
            "of its own, on this rank's GPUs)"
        )
    saved = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", *_LAUNCHER_VARIABLES)}
    for key in _LAUNCHER_VARIABLES:
        os.environ.pop(key, None)
    os.environ["CUDA_VISIBLE_DEVICES"] = visible_devices
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def model_dir(backend: ModelBackend, model_path: str | Path | None, engine: str) -> Path:
    """The model folder an engine loads: ``model_path``, else the backend's own."""
    path = model_path if model_path is not None else getattr(backend, "path", None)
    if path is None:
        raise ConfigError(f"{engine}: give model_path (the backend knows no checkpoint directory)")
    return Path(path)


def check_engine_options(
    options: Mapping[str, Any], engine: Callable[..., Any], *, where: str = "rollout.engine_options"
) -> None:
    """Refuse an option vLLM's engine does not take (a field of its ``EngineArgs``, vLLM's ``--help``
    names), naming the key, the closest names (vLLM's and the keyword parameters of ``engine``, the
    engine class) and where to look.

    Any field passes as it is, so that a new vLLM option needs no change here."""
    import dataclasses
    import difflib
    import inspect

    from vllm.engine.arg_utils import AsyncEngineArgs

    fields = {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    own = [p.name for p in inspect.signature(engine).parameters.values() if p.kind is p.KEYWORD_ONLY]
    for key in options:
        if key not in fields:
            close = difflib.get_close_matches(key, [*fields, *own], n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise ConfigError(
                f"{where}.{key}: vLLM's engine takes no option {key!r}; {hint}"
                "its options are the fields of vllm.engine.arg_utils.EngineArgs "
                "(https://docs.vllm.ai/en/stable/configuration/engine_args.html)"
            )


#: The executor of an engine with tensor parallelism. Every engine here runs on one node (a torchrun
#: rank's GPUs, or one Ray bundle of ``rollout_gpus_per_worker`` GPUs), so its ranks are processes
#: of its own (vLLM's ``mp`` executor). Left to itself, vLLM picks its ``ray`` executor inside a Ray
#: actor that has a placement group, which refuses a bundle of more than one GPU ("Placement group
#: bundle cannot have more than 1 GPU"): a split-placement rollout worker of TP 2 could not start.
TP_EXECUTOR = "mp"


def spec_keywords(spec: EngineSpec, options: Mapping[str, Any], fields: Sequence[str]) -> dict[str, Any]:
    """The keywords of a vLLM engine built from ``spec``: its ``fields`` that are set, then ``options``
    (``rollout.engine_options``), which win (``dtype``, ``max_model_len``, ...)."""
    keywords = {key: getattr(spec, key) for key in fields if getattr(spec, key) is not None}
    return {**keywords, **options}


def engine_options(
    model: Path,
    *,
    dtype: str,
    seed: int,
    enforce_eager: bool,
    tensor_parallel_size: int,
    gpu_memory_utilization: float,
    max_media_per_prompt: int,
    **optional: Any,
) -> dict[str, Any]:
    """vLLM engine arguments: log-probs after the logit bias (``processed_logprobs``, as the training
    forward computes them), ``max_media_per_prompt`` videos and images per prompt, the GPU memory share
    (not on CPU), the executor of a tensor-parallel engine (:data:`TP_EXECUTOR`), and each of
    ``optional`` that is not ``None`` (a user's ``distributed_executor_backend`` wins)."""
    from vllm.platforms import current_platform

    options: dict[str, Any] = {
        "model": str(model),
        "dtype": dtype,
        "seed": seed,
        "enforce_eager": enforce_eager,
        "tensor_parallel_size": tensor_parallel_size,
        "logprobs_mode": "processed_logprobs",
        "limit_mm_per_prompt": {"video": max_media_per_prompt, "image": max_media_per_prompt},
    }
    if tensor_parallel_size > 1:
        options["distributed_executor_backend"] = TP_EXECUTOR
    options.update({k: v for k, v in optional.items() if v is not None})
    if not current_platform.is_cpu():
        options["gpu_memory_utilization"] = gpu_memory_utilization
    return options


def weight_sync_options(weight_sync: str, bucket_mb: int, engine_args: Mapping[str, Any]) -> dict[str, Any]:
    """The engine options a ``weight_sync`` mode needs (checked with its bucket size in MiB):
    ``memory`` adds the worker methods that receive the buckets
    (:class:`videorl.rollout.vllm_weights.WeightReceiver`)."""
    from videorl.rollout.vllm_weights import RECEIVER

    if weight_sync not in ("memory", "folder"):
        raise ConfigError(f"rollout.weight_sync must be memory or folder, got {weight_sync!r}")
    if bucket_mb < 1:
        raise ConfigError(f"rollout.weight_bucket_mb must be >= 1, got {bucket_mb}")
    if weight_sync == "folder":
        return {}
    if engine_args.get("worker_extension_cls") not in (None, RECEIVER):
        raise ConfigError(
            "rollout.engine_options.worker_extension_cls: the in-memory weight refresh "
            "(rollout.weight_sync=memory) installs its own worker extension; set rollout.weight_sync=folder "
            "to use yours"
        )
    return {"worker_extension_cls": RECEIVER}


def weights_dtype(dtype: str) -> Any:
    """The torch dtype of an engine ``dtype`` option (``auto``: None, the weights stay as they are)."""
    import torch

    return None if dtype == "auto" else getattr(torch, dtype)


def suppression_bias(backend: ModelBackend) -> dict[int, float]:
    """The logit bias that keeps the backend's forbidden ids (visual placeholders, ...) from being sampled."""
    return {int(i): SUPPRESS for i in backend.forbidden_token_ids()}


def vllm_sampling_params(
    params: SamplingParams,
    bias: Mapping[int, float],
    *,
    per_request_seed: bool = False,
    final_only: bool = False,
) -> Any:
    """``params`` as ``vllm.SamplingParams``, with the log-prob of each sampled token and ``bias``.

    Sampling follows the engine's seed (``seed``, each rank's own): ``params.seed`` is dropped, since
    a seeded request puts vLLM's sampler on its per-request generator path (slower at a large
    batch); ``per_request_seed`` (``rollout.engine_options.per_request_seeds``) keeps it;
    ``final_only`` asks for the finished output only (streaming engines).
    """
    from vllm import SamplingParams as VSamplingParams

    extra: dict[str, Any] = {}
    if final_only:
        from vllm.sampling_params import RequestOutputKind

        extra["output_kind"] = RequestOutputKind.FINAL_ONLY
    return VSamplingParams(
        n=params.n,
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k if params.top_k > 0 else -1,
        max_tokens=params.max_tokens,
        seed=params.seed if per_request_seed else None,
        logprobs=0,
        logit_bias=dict(bias) or None,
        **extra,
    )


def completions(
    request: RolloutRequest, output: Any, token_map: Mapping[int, int] | None = None
) -> list[Completion]:
    """The completions of one finished vLLM ``RequestOutput``, after checking that vLLM saw the
    framework's prompt ids, read through the backend's ``token_map``
    (:func:`~videorl.backend.engine_token_map`); an :class:`~videorl.errors.AlignmentError` naming the
    sample otherwise."""
    check_same_prompt(
        request.sample_id,
        request.prompt_ids,
        output.prompt_token_ids or [],
        where="vLLM",
        engine_token_map=token_map,
    )
    group = []
    for completion in output.outputs:
        ids = [int(t) for t in completion.token_ids]
        logprobs = [float(step[t].logprob) for step, t in zip(completion.logprobs or [], ids)]
        group.append(Completion(ids, logprobs, "stop" if completion.finish_reason == "stop" else "length"))
    return group


class WeightsFolder:
    """The model folder an engine reloads refreshed weights from, in shared memory when there is one.

    vLLM points its model config at the folder it reloads from (and, in one process, loads its
    processor from there later), so the folder is a whole HF model folder: the base model's config,
    tokenizer and processor files with the new weights (:func:`videorl.runs.export.export_hf_model`).
    It is removed by :meth:`close`, or at the latest when this object is collected or the process exits.
    """

    def __init__(self, base_model: str | Path) -> None:
        self.base_model = Path(base_model)
        self.root: Path | None = None

    def write(self, state_dict: Mapping[str, Any]) -> Path:
        """Write ``state_dict`` (HF parameter names, full tensors) and return the model folder."""

        if self.root is None:
            shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
            self.root = Path(tempfile.mkdtemp(prefix="videorl-weights-", dir=shm))
            self._cleanup = weakref.finalize(self, shutil.rmtree, self.root, ignore_errors=True)
        return export_hf_model(dict(state_dict), self.base_model, self.root / "model", overwrite=True)

    def close(self) -> None:
        if self.root is not None:
            self._cleanup()
            self.root = None
