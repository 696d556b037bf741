"""Algorithms as components: advantage estimators, policy losses and named presets of both.

Two registries, so that any estimator combines with any loss (as in veRL): an *advantage estimator*
turns the ``(G, n)`` rewards of a step's groups into advantages (or, when it needs more, the step's
:class:`StepRewards`: rewards, the reward's components, response lengths); a *policy loss* turns per-token
log-probs, the old (behaviour) log-probs, advantages and the response mask into a scalar loss. A
*preset* names a pair and the settings that make a published algorithm (``dapo``: clip-higher,
dynamic sampling, overlong shaping and filtering).

A component is a dataclass: its fields are its options, each with a default and a ``help`` text in
the field's metadata (``dataclasses.field(default=..., metadata={"help": ...})``). The loop calls
only :func:`advantages_of` (which calls :meth:`StepAdvantageEstimator.estimate` or
:meth:`AdvantageEstimator.advantages`) and :meth:`PolicyLossFunction.loss`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from videorl.errors import ConfigError

if TYPE_CHECKING:
    import torch

    from videorl.config import AlgorithmConfig
    from videorl.plugins import Plugins
    from videorl.registry import Registry

__all__ = [
    "SHARED_OPTIONS",
    "AdvantageEstimator",
    "Algorithm",
    "LossScale",
    "PolicyLoss",
    "PolicyLossFunction",
    "Preset",
    "StepAdvantageEstimator",
    "StepRewards",
    "advantages_of",
    "build",
    "component_options",
    "resolve",
]


@runtime_checkable
class AdvantageEstimator(Protocol):
    """Advantages of one step's groups."""

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        """``(G, n)`` float32 rewards (group ``g``'s ``n`` responses in row ``g``) -> ``(G, n)``
        advantages."""
        ...


@dataclass(frozen=True)
class StepRewards:
    """What an estimator may read of one step's ``G`` groups of ``n`` responses, in group order."""

    rewards: torch.Tensor  # (G, n) float32: the scores, with DAPO's overlong shaping when it is on
    lengths: torch.Tensor  # (G, n) int64: the tokens of each response the update trains on
    parts: Sequence[Sequence[Mapping[str, float]]]  # [g][j]: the reward's components (Episode.parts)


@runtime_checkable
class StepAdvantageEstimator(Protocol):
    """Advantages of one step's groups from more than their rewards: the response lengths (per-token
    whitening, REINFORCE++) or the reward's components (GDPO)."""

    def estimate(self, step: StepRewards) -> torch.Tensor:
        """``step`` -> ``(G, n)`` advantages, one per response (every token of it takes that value)."""
        ...


def advantages_of(estimator: AdvantageEstimator | StepAdvantageEstimator, step: StepRewards) -> torch.Tensor:
    """The ``(G, n)`` advantages of ``step`` by ``estimator``: its ``estimate(step)`` when it has one,
    else its ``advantages(rewards)`` (the simple form, which every estimator written before
    :class:`StepRewards` existed implements)."""
    if isinstance(estimator, StepAdvantageEstimator):
        out = estimator.estimate(step)
    else:
        out = estimator.advantages(step.rewards)
    if tuple(out.shape) != tuple(step.rewards.shape):
        raise ValueError(
            f"the advantage estimator {type(estimator).__name__} returned advantages shaped "
            f"{tuple(out.shape)} for rewards shaped {tuple(step.rewards.shape)}"
        )
    return out


@dataclass
class PolicyLoss:
    """A policy loss of one micro-batch and what to log about it."""

    loss: torch.Tensor  # scalar, differentiable
    clip_fraction: torch.Tensor  # share of valid tokens where the clip (or weight clip) applied
    approx_kl: torch.Tensor  # mean over valid tokens of old_log_prob - log_prob (detached)


@dataclass(frozen=True)
class LossScale:
    """What a loss may normalise by, counted over the whole mini-batch (all micro-batches and ranks,
    divided by the world size, because FSDP averages the ranks' gradients)."""

    tokens: float  # valid response tokens
    responses: float  # responses (sequences)
    max_response_length: int  # rollout.max_response_length (Dr. GRPO's constant)


@runtime_checkable
class PolicyLossFunction(Protocol):
    """A policy-gradient loss of one micro-batch."""

    def loss(
        self,
        log_probs: torch.Tensor,
        old_log_probs: torch.Tensor,
        advantages: torch.Tensor,
        mask: torch.Tensor,
        scale: LossScale,
    ) -> PolicyLoss:
        """``(B, T)`` log-probs (with graph), ``(B, T)`` old log-probs, ``(B,)`` advantages, ``(B, T)``
        mask -> the loss (a micro-batch's share of the mini-batch's loss, see :class:`LossScale`)."""
        ...


@dataclass(frozen=True)
class Preset:
    """A named algorithm: ``algorithm.*`` settings (``adv_estimator``, ``policy_loss``,
    ``estimator_options``, ``loss_options`` and section keys such as ``dynamic_sampling``)."""

    settings: Mapping[str, Any]
    description: str = ""


@dataclass
class Algorithm:
    """The estimator and the loss a run trains with."""

    estimator: AdvantageEstimator | StepAdvantageEstimator
    loss: PolicyLossFunction

    @property
    def greedy_baseline(self) -> bool:
        """Whether the estimator asks the rollout for one extra greedy response per prompt, scored and
        never trained on (its class says ``greedy_baseline = True``, e.g. ReMax)."""
        return bool(getattr(self.estimator, "greedy_baseline", False))

    @property
    def loss_agg_mode(self) -> str:
        """How the update reduces its other per-token terms (KL, entropy): as the loss reduces its own
        (its ``loss_agg_mode``, an option or a class attribute), else token-mean."""
        return str(getattr(self.loss, "loss_agg_mode", "token-mean"))


#: ``algorithm.*`` keys that are also the defaults of component options of the same name
SHARED_OPTIONS = ("norm_adv_by_std", "adv_eps", "clip_low", "clip_high", "loss_agg_mode")


def component_options(target: Any) -> dict[str, tuple[Any, str]]:
    """A component class's options: ``name -> (default, help)``."""
    if not dataclasses.is_dataclass(target):
        return {}
    out = {}
    for f in dataclasses.fields(target):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = dataclasses.MISSING
        out[f.name] = (default, str(f.metadata.get("help", "")))
    return out


# --- resolution -----------------------------------------------------------------------------------


def _registry(plugins: Plugins, kind: str) -> Registry[Any]:
    return plugins.registries[kind]


def _preset(plugins: Plugins, name: str) -> Preset:
    registry = _registry(plugins, "algorithm_presets")
    try:
        target = registry.get(name)
    except Exception as exc:
        raise ConfigError(f"algorithm.preset: {exc}") from None
    preset = target() if callable(target) else target
    if not isinstance(preset, Preset):
        raise ConfigError(f"algorithm.preset {name!r} is {type(preset).__name__}, not a videorl Preset")
    return preset


def resolve(cfg: AlgorithmConfig, plugins: Plugins) -> AlgorithmConfig:
    """``cfg`` with the preset applied and every option of its estimator and loss spelled out.

    A preset's setting applies where ``cfg`` keeps the schema default (for the two ``*_options``
    mappings: option by option, yours win). A component option named like an ``algorithm.*`` key
    (:data:`SHARED_OPTIONS`) takes that key's value when it is not the schema default. An unknown
    component or option raises a :class:`ConfigError` naming the component and the closest names.
    Resolving twice changes nothing.
    """
    from videorl.config import AlgorithmConfig

    defaults = AlgorithmConfig()
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    if cfg.preset is not None:
        preset = _preset(plugins, cfg.preset)
        values["preset"] = _registry(plugins, "algorithm_presets").canonical(cfg.preset)
        for key, value in preset.settings.items():
            if key not in values:
                raise ConfigError(f"algorithm.preset {cfg.preset!r} sets an unknown key algorithm.{key}")
            if key in ("estimator_options", "loss_options"):
                values[key] = {**value, **values[key]}
            elif values[key] == getattr(defaults, key):
                values[key] = value
    for kind, name_key, options_key in (
        ("advantage_estimators", "adv_estimator", "estimator_options"),
        ("policy_losses", "policy_loss", "loss_options"),
    ):
        registry = _registry(plugins, kind)
        try:
            canonical = registry.canonical(values[name_key])
            target = registry.get(canonical)
        except Exception as exc:
            raise ConfigError(f"algorithm.{name_key}: {exc}") from None
        values[name_key] = canonical
        declared = component_options(target)
        given = dict(values[options_key])
        for key in given:
            if key not in declared:
                close = difflib.get_close_matches(key, list(declared), n=3, cutoff=0.6)
                hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
                raise ConfigError(
                    f"algorithm.{options_key}.{key}: the {registry.kind} {canonical!r} has no option "
                    f"{key!r}.{hint} Its options: {', '.join(declared) or '(none)'}."
                )
        resolved = {}
        for key, (default, _) in declared.items():
            if key in given:
                resolved[key] = given[key]
            elif key in SHARED_OPTIONS and values[key] != getattr(defaults, key):
                resolved[key] = values[key]
            elif default is dataclasses.MISSING:
                raise ConfigError(
                    f"algorithm.{options_key}.{key} is required by the {registry.kind} {canonical!r}"
                )
            else:
                resolved[key] = default
        values[options_key] = resolved
    return AlgorithmConfig(**values)


def build(cfg: AlgorithmConfig, plugins: Plugins) -> Algorithm:
    """The estimator and loss ``cfg`` names in ``plugins`` (the run's: installed, run plugins and
    ``--plugin`` modules), made with their resolved options. A run builds its algorithm once, where it
    is composed, and hands the object to the step; nothing later looks components up by name."""
    cfg = resolve(cfg, plugins)
    made = []
    for kind, name, options in (
        ("advantage_estimators", cfg.adv_estimator, cfg.estimator_options),
        ("policy_losses", cfg.policy_loss, cfg.loss_options),
    ):
        try:
            made.append(_registry(plugins, kind).create(name, **options))
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"algorithm: the {_registry(plugins, kind).kind} {name!r}: {exc}") from exc
    return Algorithm(made[0], made[1])
