"""The algorithm section resolves against the registries: presets, component options, typos."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from videorl import algorithms
from videorl.algorithms import PolicyLoss
from videorl.algorithms.components import (
    CISPOLoss,
    GDPOEstimator,
    GMPOLoss,
    GRPOEstimator,
    GSPOLoss,
    PPOClipLoss,
    ReinforcePlusPlusEstimator,
    ReMaxEstimator,
    RLOOEstimator,
    SAPOLoss,
)
from videorl.config import AlgorithmConfig, TrainConfig, load_config
from videorl.errors import ConfigError
from videorl.plugins import load_plugins
from videorl.testing import CliResult, assert_algorithm_contract

PLUGINS = load_plugins(entry_points=False)


def resolve(*overrides: str) -> AlgorithmConfig:
    config: TrainConfig = load_config(None, ["model.path=/m", "data.train_files=[a]", *overrides])
    return algorithms.resolve(config.algorithm, PLUGINS)


def test_the_default_resolves_to_grpo_with_every_option_spelled_out() -> None:
    cfg = resolve()
    assert (cfg.preset, cfg.adv_estimator, cfg.policy_loss) == (None, "grpo", "ppo_clip")
    assert cfg.estimator_options == {"norm_adv_by_std": True, "adv_eps": 1e-6}
    assert cfg.loss_options == {
        "clip_low": 0.2, "clip_high": 0.28, "loss_agg_mode": "token-mean", "clip_ratio_c": None,
    }  # fmt: skip
    assert algorithms.resolve(cfg, PLUGINS) == cfg  # resolving twice changes nothing
    built = algorithms.build(cfg, PLUGINS)
    assert built.estimator == GRPOEstimator() and built.loss == PPOClipLoss()


def test_a_preset_sets_what_the_config_leaves_at_its_default() -> None:
    cfg = resolve("algorithm.preset=dapo", "algorithm.dynamic_sampling_max_tries=3")
    assert cfg.dynamic_sampling and cfg.overlong_buffer == 512 and cfg.dynamic_sampling_max_tries == 3
    gspo = resolve("algorithm.preset=GSPO-token", "algorithm.loss_options={clip_high: 0.001}")
    assert gspo.preset == "gspo_token"  # the registered spelling
    assert gspo.loss_options == {"clip_low": 3e-4, "clip_high": 0.001, "token_level": True}  # yours win
    assert algorithms.build(gspo, PLUGINS).loss == GSPOLoss(3e-4, 0.001, True)
    # a changed section key wins over the preset
    # (dynamic_sampling false is the default: the preset's true stays)
    assert resolve("algorithm.preset=dapo", "algorithm.overlong_buffer=64").overlong_buffer == 64


def test_a_section_key_is_the_option_of_that_name_only_when_changed() -> None:
    assert resolve("algorithm.policy_loss=cispo").loss_options["clip_low"] == 1.0  # CISPO's own default
    assert resolve("algorithm.policy_loss=cispo", "algorithm.clip_low=0.5").loss_options["clip_low"] == 0.5
    assert resolve("algorithm.clip_high=0.3").loss_options["clip_high"] == 0.3
    assert resolve("algorithm.norm_adv_by_std=false").estimator_options["norm_adv_by_std"] is False


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algorithm.loss_options={clip_hihg: 0.3}"],
            "algorithm.loss_options.clip_hihg: the policy loss 'ppo_clip' has no option 'clip_hihg'. "
            "Did you mean 'clip_high'? Its options: clip_low, clip_high, loss_agg_mode, clip_ratio_c.",
        ),
        (
            ["algorithm.adv_estimator=rloo", "algorithm.estimator_options={adv_eps: 0.1}"],
            "the advantage estimator 'rloo' has no option 'adv_eps'. Its options: (none).",
        ),
        (
            ["algorithm.policy_loss=cipso"],
            "algorithm.policy_loss: unknown policy loss 'cipso'. Did you mean 'cispo'?",
        ),
        (["algorithm.adv_estimator=rlo"], "unknown advantage estimator 'rlo'. Did you mean 'rloo'?"),
        (["algorithm.preset=grpoo"], "unknown algorithm preset 'grpoo'. Did you mean 'grpo'"),
        (
            ["algorithm.loss_options={loss_agg_mode: sum}"],
            "algorithm: the policy loss 'ppo_clip': loss_agg_mode must be token-mean",
        ),
    ],
)
def test_an_unknown_component_or_option_names_the_component(overrides: list[str], message: str) -> None:
    config: TrainConfig = load_config(None, ["model.path=/m", "data.train_files=[a]", *overrides])
    with pytest.raises(ConfigError) as info:
        algorithms.build(config.algorithm, PLUGINS)
    assert message in str(info.value)


def test_the_2026_presets_resolve_to_their_components() -> None:
    gdpo = resolve("algorithm.preset=gdpo")
    assert (gdpo.adv_estimator, gdpo.policy_loss) == ("gdpo", "ppo_clip")
    assert gdpo.estimator_options == {
        "reward_weights": {"accuracy": 1.0, "format": 1.0}, "adv_eps": 1e-6, "whiten_over": "responses",
    }  # fmt: skip
    gmpo = resolve("algorithm.preset=gmpo")
    assert (gmpo.policy_loss, gmpo.loss_options) == ("gmpo", {"clip_low": 0.4, "clip_high": 0.4})
    assert resolve("algorithm.policy_loss=geo_mean").policy_loss == "gmpo"  # veRL's name
    sapo = resolve("algorithm.preset=sapo")
    assert sapo.loss_options == {"tau_pos": 1.0, "tau_neg": 1.05, "loss_agg_mode": "token-mean"}
    assert resolve("algorithm.preset=reinforce_pp").estimator_options["whiten_over"] == "tokens"
    assert resolve("algorithm.kl_penalty=k2").kl_penalty == "k2"
    with pytest.raises(ConfigError, match="algorithm.kl_penalty must be one of"):
        resolve("algorithm.kl_penalty=k4")


def test_component_options_carry_defaults_and_help() -> None:
    for component in (GRPOEstimator, PPOClipLoss, GSPOLoss, CISPOLoss):
        options = algorithms.component_options(component)
        assert options and all(help_text for _, help_text in options.values()), component
    assert algorithms.component_options(GSPOLoss)["clip_high"][0] == 4e-4


def test_print_config_shows_the_resolved_algorithm_and_rejects_a_typo(
    run_cli: Callable[..., CliResult], tmp_path: Path
) -> None:
    path = tmp_path / "train.yaml"
    path.write_text("model:\n  path: /m\ndata:\n  train_files: [a.jsonl]\nalgorithm:\n  preset: cispo\n")
    out = run_cli("train", str(path), "--print-config").assert_success().output
    assert "  policy_loss: cispo\n  loss_options:\n    clip_low: 1.0\n    clip_high: 0.28\n" in out
    bad = run_cli("train", str(path), "--print-config", "algorithm.loss_options={clip_hi: 1}")
    assert bad.exit_code != 0 and "the policy loss 'cispo' has no option 'clip_hi'" in bad.stderr
    assert str(path) in bad.stderr


@pytest.mark.parametrize(
    "component",
    [
        GRPOEstimator,
        RLOOEstimator,
        ReMaxEstimator,
        ReinforcePlusPlusEstimator,
        GDPOEstimator,
        PPOClipLoss,
        GSPOLoss,
        CISPOLoss,
        GMPOLoss,
        SAPOLoss,
    ],
)
def test_the_built_ins_pass_the_third_party_contract(component: type) -> None:
    assert isinstance(assert_algorithm_contract(component), component)


def test_the_contract_rejects_an_option_without_help_and_a_loss_that_ignores_the_mask() -> None:
    @dataclasses.dataclass
    class NoHelp:
        eps: float = 0.1

        def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
            return rewards

    with pytest.raises(AssertionError, match="option 'eps' has no help text"):
        assert_algorithm_contract(NoHelp)

    @dataclasses.dataclass
    class Unmasked:
        def loss(self, log_probs, old_log_probs, advantages, mask, scale):  # type: ignore[no-untyped-def]
            if advantages.dim() == 1:
                advantages = advantages.unsqueeze(-1)
            loss = -(advantages * log_probs).mean()
            return PolicyLoss(loss, torch.tensor(0.0), torch.tensor(0.0))

    with pytest.raises(AssertionError, match="padding tokens get a gradient"):
        assert_algorithm_contract(Unmasked)
