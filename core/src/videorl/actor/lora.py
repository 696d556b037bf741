"""LoRA training with peft (``actor.lora``): adapters in the actor, the reference and engines from the same
module.

- :func:`inject` puts peft's LoRA layers into the actor's own module, in place: the model keeps its
  class, its ``forward`` signature (``logits_to_keep``), its vision hooks and its FSDP units, so every
  path that takes the actor (one process, torchrun/FSDP2, Ray workers, the shared hf engine) takes it
  unchanged. The base weights are frozen in ``model.dtype`` (they never move, so they need no float32
  masters); the adapters train in float32, and only they are in the optimizer.
- :class:`Adapters` is what the actor holds: the adapters' tensors for a checkpoint (gathered from FSDP
  shards), the base weights with the adapters merged for an engine's refresh (peft's merge math, per
  tensor, on a copy: the module itself is never merged), and the module with its adapters off, which
  is the reference policy of the KL term (no second copy in memory).
- Export: a LoRA run's checkpoint becomes a merged HF model (``from_pretrained`` loads it) or the adapter
  in PEFT's format (``PeftModel.from_pretrained`` loads it); an adapter folder given to evaluation is
  merged into its base model first (:func:`merged_adapter_model`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from videorl.atomic import atomic_write_text
from videorl.errors import ConfigError, VideorlError
from videorl.hub import resolve_model
from videorl.runs.checkpoint import Checkpoint, CheckpointManager
from videorl.runs.export import (
    EXPORT_MARKER,
    check_export_target,
    export_hf_model,
    publish_folder,
    run_config,
)
from videorl.runs.manifest import FORMAT_VERSION

if TYPE_CHECKING:
    import torch

    from videorl.config.schema import LoraConfig

ADAPTER = "default"  # peft's adapter name: one adapter per actor
ADAPTER_CONFIG = "adapter_config.json"  # what marks a PEFT adapter folder
_VISION_TOWERS = ("visual", "vision_tower", "vision_model")


def require_peft() -> Any:
    """The ``peft`` module, or an error saying how to install it."""
    try:
        import peft
    except ImportError as exc:
        raise ConfigError(
            f'actor.lora needs peft, which is not installed ({exc}): pip install "videorl[lora]"'
        ) from None
    return peft


# --- which layers ---------------------------------------------------------------------------------


def vision_tower(model: torch.nn.Module) -> str | None:
    """The module name of ``model``'s vision tower (``model.visual`` in Qwen-VL), or None."""
    for name, _ in model.named_modules():
        if name.rsplit(".", 1)[-1] in _VISION_TOWERS and name.count(".") <= 1:
            return name
    return None


def target_modules(model: torch.nn.Module, settings: LoraConfig) -> list[str]:
    """The full names of the linear layers that get adapters: those of the language model whose last
    name part is in ``settings.target_modules``, and every one of the vision tower when it is adapted."""
    import torch

    tower = vision_tower(model)
    linear = [name for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)]

    def in_tower(name: str) -> bool:
        return tower is not None and name.startswith(f"{tower}.")

    wanted = set(settings.target_modules)
    chosen = [n for n in linear if not in_tower(n) and n.rsplit(".", 1)[-1] in wanted]
    missing = wanted - {n.rsplit(".", 1)[-1] for n in chosen}
    if missing:
        names = sorted({n.rsplit(".", 1)[-1] for n in linear if not in_tower(n)})
        raise ConfigError(
            f"actor.lora.target_modules: {', '.join(sorted(missing))} name no linear layer of "
            f"{type(model).__name__}'s language model; its linear layers: {', '.join(names)}"
        )
    head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()  # type: ignore[operator]
    if head is not None and embeddings is not None and head.weight is embeddings.weight:
        tied = [n for n, m in model.named_modules() if m is head and n in chosen]
        if tied:
            raise ConfigError(
                f"actor.lora.target_modules: {tied[0]} shares its weight with the input embeddings "
                "(tie_word_embeddings): merging its adapter would change both; leave it out"
            )
    if settings.vision_tower == "adapted":
        if tower is None:
            raise ConfigError(
                f"actor.lora.vision_tower is adapted but {type(model).__name__} has no vision tower "
                f"(no module named {' or '.join(_VISION_TOWERS)}); set it to frozen"
            )
        chosen += [n for n in linear if in_tower(n)]
    return chosen


def peft_config(settings: LoraConfig, targets: list[str], base_model: str | None = None) -> Any:
    """peft's ``LoraConfig`` for ``settings`` on the layers ``targets`` (full module names)."""
    peft = require_peft()
    return peft.LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        use_rslora=settings.use_rslora,
        target_modules=targets,
        bias="none",
        base_model_name_or_path=base_model,
    )


# --- the adapters of an actor ---------------------------------------------------------------------


def inject(model: torch.nn.Module, settings: LoraConfig) -> Adapters:
    """Put LoRA adapters into ``model`` in place (before FSDP sharding: the adapters shard with their
    layers); every other parameter is frozen. The adapters are float32 whatever the base's dtype.

    ``B`` starts at zero, so the policy starts as the base model (the engine, loaded from the base
    checkpoint, needs no refresh before the first step)."""
    import torch

    peft = require_peft()
    config = peft_config(settings, target_modules(model, settings))
    peft.inject_adapter_in_model(config, model, adapter_name=ADAPTER)
    adapters = Adapters(model)
    for param in adapters.parameters():
        param.data = param.data.to(torch.float32)
    return adapters


class Adapters:
    """The LoRA adapters injected into one actor module (:func:`inject`); ``model`` may be sharded
    (FSDP2) after this is built: names are looked up on it each time."""

    def __init__(self, model: torch.nn.Module) -> None:
        from peft.tuners.lora import Linear as LoraLinear

        self.model = model
        self.names = [name for name, p in model.named_parameters() if p.requires_grad]
        # module name -> (scale, fan_in_fan_out): what merging a layer's adapter takes besides its tensors
        self.layers: dict[str, tuple[float, bool]] = {
            name: (float(m.scaling[ADAPTER]), bool(m.fan_in_fan_out))
            for name, m in model.named_modules()
            if isinstance(m, LoraLinear)  # target_modules chooses linear layers only
        }

    def parameters(self) -> list[torch.nn.Parameter]:
        """The trainable parameters (what the optimizer steps)."""
        params = dict(self.model.named_parameters())
        return [params[name] for name in self.names]

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        """Set the adapters from full tensors (each rank keeps its shard under FSDP); anything but this
        run's adapters is an error that says which tensors differ."""
        import torch
        from torch.distributed.tensor import DTensor, distribute_tensor

        missing = [n for n in self.names if n not in state]
        unexpected = [n for n in state if n not in set(self.names)]
        if missing or unexpected:
            raise ConfigError(
                "the checkpoint's model state is not this run's LoRA adapters "
                f"({len(missing)} missing, e.g. {missing[:2]}; {len(unexpected)} unexpected, e.g. "
                f"{unexpected[:2]}): it was written by full fine-tuning or with other actor.lora "
                "target_modules / vision_tower settings; resume with the settings it was trained with"
            )
        with torch.no_grad():
            for name, param in zip(self.names, self.parameters()):
                value = state[name]
                if tuple(value.shape) != tuple(param.shape):
                    raise ConfigError(
                        f"checkpoint tensor {name} has shape {tuple(value.shape)}, this run's adapter "
                        f"{tuple(param.shape)}: actor.lora.rank differs from the run that wrote it"
                    )
                if isinstance(param, DTensor):
                    full = value.to(param.device, param.dtype)
                    shard = distribute_tensor(full, param.device_mesh, param.placements, src_data_rank=None)
                    param.to_local().copy_(shard.to_local())
                else:
                    param.copy_(value)

    def merged(
        self, state: Mapping[str, torch.Tensor], dtype: torch.dtype | None = None
    ) -> dict[str, torch.Tensor]:
        """The base model's state dict (its own parameter names) with each adapter merged into its layer's
        weight: ``W + transpose(B @ A, fan_in_fan_out) * scale``, peft's merge, computed in float32 per
        tensor from ``state`` (the actor's full state dict); floating tensors in ``dtype`` when given,
        else in the base weight's dtype."""
        import torch
        from peft.utils.other import transpose

        adapter_keys = {f"{layer}.lora_{ab}.{ADAPTER}.weight" for layer in self.layers for ab in "AB"}
        out: dict[str, torch.Tensor] = {}
        for name, value in state.items():
            if name in adapter_keys:
                continue
            module, _, leaf = name.rpartition(".")
            layer = module.removesuffix(".base_layer")
            merged = value
            if module.endswith(".base_layer") and layer in self.layers:
                name = f"{layer}.{leaf}"
                if leaf == "weight":
                    scale, fan_in_fan_out = self.layers[layer]
                    a = state[f"{layer}.lora_A.{ADAPTER}.weight"].to(torch.float32)
                    b = state[f"{layer}.lora_B.{ADAPTER}.weight"].to(torch.float32)
                    merged = value.to(torch.float32) + transpose(b @ a, fan_in_fan_out) * scale
            out[name] = merged.to(dtype or value.dtype) if value.is_floating_point() else value
        return out

    @contextmanager
    def disabled(self) -> Iterator[torch.nn.Module]:
        """The module with its adapters off: the base model, i.e. the reference policy of the KL term."""
        from peft.tuners.tuners_utils import BaseTunerLayer

        layers = [m for m in self.model.modules() if isinstance(m, BaseTunerLayer)]
        params = self.parameters()
        for layer in layers:
            layer.enable_adapters(False)
        # peft also clears requires_grad when it disables; FSDP2 reads it when it first gathers a unit,
        # which may be this forward: the adapters must stay trainable for the update that follows.
        for param in params:
            param.requires_grad_(True)
        try:
            yield self.model
        finally:
            for layer in layers:
                layer.enable_adapters(True)


class AdapterState:
    """The actor's adapters and their optimizer states as a DCP ``Stateful`` (what
    :func:`videorl.runs.resume.save_checkpoint` and ``resume`` take): the frozen base is left out,
    so a checkpoint holds the adapters alone; under FSDP each rank its shards."""

    def __init__(self, adapters: Adapters, optimizer: torch.optim.Optimizer) -> None:
        self.adapters, self.optimizer = adapters, optimizer

    def state_dict(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(ignore_frozen_params=True)
        model, optimizer = get_state_dict(self.adapters.model, self.optimizer, options=options)
        return {"model": model, "optimizer": optimizer}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

        set_state_dict(
            self.adapters.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optimizer"],
            options=StateDictOptions(strict=False),  # the frozen base is in no checkpoint
        )


# --- export and adapter folders -------------------------------------------------------------------


def run_settings(checkpoint: Path) -> LoraConfig | None:
    """``actor.lora`` of the run that wrote ``checkpoint`` (its ``config.yaml``) when it trained LoRA
    adapters; None for full fine-tuning or a checkpoint outside its run."""

    config = run_config(checkpoint)
    return config.actor.lora if config is not None and config.actor.lora.enabled else None


def export_policy(
    checkpoint: Path,
    base: Path,
    out: Path,
    backends: Any,
    *,
    adapter: bool = False,
    overwrite: bool = False,
    dtype: str | None = None,
) -> Path:
    """The policy of ``checkpoint`` in ``out`` (``videorl export``): a plain HF model directory, for a LoRA
    run with its adapters merged into ``base``; with ``adapter``, a LoRA run's adapter in PEFT's format.
    The weights are in ``dtype`` (``float32``, ``bfloat16``, ``float16``; None: the run's ``model.dtype``,
    the dtype its engine generated with; float32 keeps a full fine-tuning run's float32 master weights;
    a checkpoint outside its run: as stored). ``backends``: the model backend registry."""
    import torch

    config = run_config(checkpoint)
    name = dtype or (config.model.dtype if config is not None else None)
    weights = None if name is None else getattr(torch, name)
    settings = config.actor.lora if config is not None and config.actor.lora.enabled else None
    from videorl.backend import backend_for_model

    if settings is None and adapter:
        raise VideorlError(
            f"{checkpoint}: --adapter exports LoRA adapters, and the config.yaml of its run does not "
            "say actor.lora.enabled: true (the run trained every weight): export it without --adapter"
        )
    ckpt = CheckpointManager(checkpoint.parent).load(checkpoint)
    state = ckpt.model_state()
    layouts = _base_layouts(base, backends, settings)
    require_same_layout(state, layouts, checkpoint, base, whole=settings is None)
    if settings is None:
        whole = _MergedCheckpoint(ckpt.path, ckpt.step, merged=state)
        return export_hf_model(whole, base, out, overwrite=overwrite, dtype=weights)
    assert config is not None  # a LoRA run's settings come from its config
    if adapter:
        return _export_adapter(
            checkpoint, state, settings, base, out, backends, overwrite=overwrite, dtype=weights
        )
    # the base as the actor held it (frozen, in model.dtype), merged as the engine's refresh merges
    model = backend_for_model(base, backends).load_model(dtype=getattr(torch, config.model.dtype))
    adapters = inject(model, settings)
    adapters.load_state_dict(state)
    merged = _MergedCheckpoint(ckpt.path, ckpt.step, merged=adapters.merged(model.state_dict(), weights))
    return export_hf_model(merged, base, out, overwrite=overwrite, dtype=weights)


def _base_layouts(
    base: Path, backends: Any, settings: LoraConfig | None
) -> list[tuple[Mapping[str, Any], bool]]:
    """The layouts a checkpoint of ``base`` may hold: the architecture its ``config.json`` builds on the
    meta device (with LoRA, with the adapters injected), and for a full model the names it stores. A
    base no backend serves (a text-only model) is compared with what it stores alone. Each comes with
    whether every name of a checkpoint must be in it: not for the stored names, where a tied tensor
    (``lm_head`` tied to the embeddings) is stored once."""
    import torch

    from videorl.backend import backend_for_model

    layouts: list[tuple[Mapping[str, Any], bool]] = []
    try:
        skeleton = backend_for_model(base, backends).load_model(dtype=torch.float32, device="meta")
    except VideorlError:
        if settings is not None:  # merging needs the model itself
            raise
    else:
        if settings is not None:
            inject(skeleton, settings)  # the adapters' names and shapes on this base
        layouts.append((skeleton.state_dict(), True))
    stored = stored_layout(base) if settings is None else {}
    return [*layouts, (stored, False)] if stored else layouts


def stored_layout(base: Path) -> dict[str, Any]:
    """The names and shapes of the tensors ``base`` stores (its safetensors headers; no data is read):
    a checkpoint may hold a family's Hub names, which ``from_pretrained`` maps onto the module's."""
    from safetensors import safe_open

    out: dict[str, Any] = {}
    for path in sorted(base.glob("*.safetensors")):
        with safe_open(str(path), "pt") as stored:
            for name in stored.keys():  # noqa: SIM118 - safe_open is not a mapping
                out[name] = SimpleNamespace(shape=tuple(stored.get_slice(name).get_shape()))
    return out


def require_same_layout(
    state: Mapping[str, Any],
    references: Sequence[tuple[Mapping[str, Any], bool]],
    checkpoint: Path,
    base: Path,
    *,
    whole: bool,
) -> None:
    """Refuse (:class:`VideorlError`) a base model none of whose ``references`` layouts (its architecture
    built from its ``config.json`` on the meta device; the names it stores) holds every tensor of
    ``state`` in the same shape and, for a ``whole`` model, no tensor ``state`` lacks: the export would
    load with weights initialised afresh. The problems named are those of the first layout."""
    problems = [_layout_problems(state, reference, whole, every_name) for reference, every_name in references]
    # with nothing to compare with (no backend serves it, no safetensors) nothing is refused
    if problems and all(problems):
        raise VideorlError(
            f"{base} is not the model {checkpoint} was trained from: " + "; ".join(problems[0]) + ". Pass "
            "the run's base model as --base-model (its config.yaml names it as model.path)"
        )


def _layout_problems(
    state: Mapping[str, Any], reference: Mapping[str, Any], whole: bool, every_name: bool
) -> list[str]:
    missing = sorted(set(state) - set(reference)) if every_name else []
    extra = sorted(set(reference) - set(state)) if whole else []
    reshaped = [
        f"{name}: {list(value.shape)} in the checkpoint, {list(reference[name].shape)} in the base"
        for name, value in sorted(state.items())
        if name in reference and tuple(value.shape) != tuple(reference[name].shape)
    ]
    return [
        f"{len(items)} {what} (e.g. {items[0]})"
        for items, what in ((missing, "tensor(s) of the checkpoint are not in the base"),
                            (extra, "tensor(s) of the base are not in the checkpoint"),
                            (reshaped, "tensor(s) have another shape"))
        if items
    ]  # fmt: skip


@dataclass
class _MergedCheckpoint(Checkpoint):
    """A LoRA checkpoint whose model state is its adapters merged into the base: exported as a checkpoint
    (the same guards on the target folder, and its marker names the checkpoint)."""

    merged: dict[str, Any] = field(default_factory=dict)

    def model_state(self) -> dict[str, Any]:
        return self.merged


def _export_adapter(
    checkpoint: Path,
    state: Mapping[str, torch.Tensor],
    settings: LoraConfig,
    base: Path,
    out: Path,
    backends: Any,
    *,
    overwrite: bool,
    dtype: torch.dtype | None,
) -> Path:
    """``out``: the adapter as ``PeftModel.save_pretrained`` writes it (``adapter_config.json``,
    ``adapter_model.safetensors``, its tensors in ``dtype``; None: float32, as trained), by peft itself
    from a model built on the meta device (no base weight is read); the folder appears atomically,
    marked as an export."""
    import shutil
    import uuid

    import torch

    from videorl.backend import backend_for_model

    peft = require_peft()
    protected = {
        "the run": checkpoint.parent.parent,
        "the checkpoints": checkpoint.parent,
        "the base model": base,
    }
    check_export_target(out, protected, overwrite)
    model = backend_for_model(base, backends).load_model(dtype=torch.float32, device="meta")
    targets = sorted({name.rsplit(".lora_", 1)[0] for name in state})  # the layers the run trained
    config = peft_config(settings, targets, base_model=str(base.resolve()))
    peft_model = peft.get_peft_model(model, config, adapter_name=ADAPTER)
    tensors = {  # PeftModel's names
        f"base_model.model.{name}": value if dtype is None else value.to(dtype)
        for name, value in state.items()
    }
    unknown = sorted(set(tensors) - set(peft_model.state_dict()))
    if unknown:
        raise VideorlError(f"{checkpoint}: tensors {unknown[:3]} are no LoRA adapter of {base}")
    tmp = out.parent / f".tmp-{out.name}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir(parents=True)
        peft_model.save_pretrained(str(tmp), state_dict=tensors)
        marker = {
            "format": FORMAT_VERSION,
            "source": str(checkpoint),
            "base_model": str(base),
            "adapter": True,
        }
        atomic_write_text(tmp / EXPORT_MARKER, json.dumps(marker) + "\n")
        publish_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def is_adapter_folder(path: Path) -> bool:
    """Whether ``path`` holds a PEFT adapter (its ``adapter_config.json``)."""
    return (path / ADAPTER_CONFIG).is_file()


def merged_adapter_model(adapter: Path, run_dir: Path, backends: Any, echo: Any = print) -> Path:
    """An adapter folder given to evaluation as its model: merged into its base model (peft's
    ``merge_and_unload``) and written to ``RUN/model`` as a plain HF model, which either engine loads.
    A later call with the same adapter reuses it; one with another is refused once the run has results."""
    import torch

    from videorl.backend import backend_for_model

    target, source = run_dir / "model", str(adapter.resolve())
    marker = target / EXPORT_MARKER
    exported = json.loads(marker.read_text(encoding="utf-8")).get("source") if marker.is_file() else None
    if exported == source:
        return target
    if exported is not None and (run_dir / "results.json").is_file():
        raise VideorlError(
            f"{run_dir} holds results of {exported}, not of {source}: evaluate it into another --out"
        )
    config_file = adapter / ADAPTER_CONFIG
    try:
        base_ref = json.loads(config_file.read_text(encoding="utf-8")).get("base_model_name_or_path")
    except ValueError as exc:
        raise ConfigError(f"{config_file}: not valid JSON ({exc})") from None
    base = resolve_model(base_ref) if base_ref else None
    if base is None or not (base / "config.json").is_file():
        raise ConfigError(
            f"{config_file}: base_model_name_or_path is {base_ref!r}, not a model folder or cached Hub id: "
            "set it to the base model the adapter was trained on"
        )
    model = backend_for_model(base, backends).load_model(dtype=torch.float32)
    merged = require_peft().PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    export_hf_model(merged.state_dict(), base, target, overwrite=True)
    record = {**json.loads(marker.read_text(encoding="utf-8")), "source": source, "adapter": True}
    atomic_write_text(marker, json.dumps(record) + "\n")
    echo(f"--model {adapter}: merged the adapter into {base} as {target}")
    return target
