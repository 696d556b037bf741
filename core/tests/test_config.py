"""The training config: defaults, YAML + overrides, typed validation with locations, dumping."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from videorl.backend import VisualBudget
from videorl.config import (
    TrainConfig,
    config_keys,
    config_to_dict,
    dump_config,
    load_config,
    load_rewards,
    markdown_reference,
)
from videorl.errors import ConfigError
from videorl.option import option

REQUIRED = ["model.path=/models/tiny", "data.train_files=[train.jsonl]"]


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_seed_recipe() -> None:
    c = TrainConfig()
    assert (c.algorithm.adv_estimator, c.algorithm.clip_low, c.algorithm.clip_high) == ("grpo", 0.2, 0.28)
    assert c.algorithm.use_kl_loss is False and c.algorithm.dynamic_sampling is False
    assert c.algorithm.loss_agg_mode == "token-mean"
    assert c.rollout.n == 8 and c.rollout.max_response_length == 4096
    assert c.rollout.enable_mix_policy is False and c.rollout.mix_policy_accuracy_threshold is None
    assert (c.optim.lr, c.optim.betas, c.optim.weight_decay, c.optim.grad_clip) == (
        1e-6,
        (0.9, 0.999),
        0.01,
        1.0,
    )
    assert c.optim.lr_warmup_steps == 0
    budget = c.data.visual_budget(VisualBudget.for_factor(28))  # unset keys: the (Qwen) family's budget
    assert (budget.video_fps, budget.video_max_frames) == (2.0, 128)
    assert (budget.video_max_pixels, budget.image_max_pixels) == (262144, 1048576)
    assert c.data.source_mode == "prefer_preprocessed"
    # unset weights and fallback: each reward keeps its own defaults (a TaskReward's 0.9, 0.1, on)
    assert (c.rewards.accuracy_weight, c.rewards.format_weight, c.rewards.fallback) == (None, None, None)
    assert c.rewards.format.think == "optional"
    assert c.rewards.common_options() == {"format_rule": c.rewards.format}
    assert c.rollout.engine == "vllm"


def test_yaml_and_overrides(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
seed: 7
model:
  path: /models/tiny
data:
  train_files: [a.jsonl]
  video_fps: 1          # an int where a float is expected is fine
optim:
  lr: 1e-5              # YAML 1.1 would read this as a string; we read a float
  betas: [0.9, 0.95]
algorithm:
  clip_high: 0.3
""",
    )
    c = load_config(
        path,
        [
            "algorithm.clip_high=0.35",  # an override wins over the file
            "data.train_files=[a.jsonl, b.jsonl]",
            "model.path=2024",  # a str key keeps the text of a number
            "rollout.mix_policy_accuracy_threshold=0.5",
            "rollout.enable_mix_policy=true",
            "rewards.options.math.timeout=5",
            "rewards.routes={numerical: [{reward: numerical, weight: 0.5}, {reward: math, weight: 0.5}]}",
            "trainer.resume=auto",
        ],
    )
    assert c.seed == 7
    assert c.data.video_fps == 2.0 - 1.0 and isinstance(c.data.video_fps, float)
    assert c.optim.lr == 1e-5 and c.optim.betas == (0.9, 0.95)
    assert c.algorithm.clip_high == 0.35 and c.algorithm.clip_low == 0.2
    assert c.data.train_files == ["a.jsonl", "b.jsonl"]
    assert c.model.path == "2024"
    assert c.rollout.mix_policy_accuracy_threshold == 0.5 and c.rollout.enable_mix_policy is True
    assert c.rewards.options == {"math": {"timeout": 5}}
    assert c.rewards.routes == {"numerical": [("numerical", 0.5), ("math", 0.5)]}  # read by the section
    assert c.trainer.resume == "auto"


def test_overrides_alone_and_an_empty_file(tmp_path: Path) -> None:
    c = load_config(None, REQUIRED)
    assert c.model.path == "/models/tiny" and c.data.train_files == ["train.jsonl"]
    assert load_config(write(tmp_path, "# nothing yet\n"), REQUIRED) == c
    assert load_config(write(tmp_path, "model:\n", "null_section.yaml"), REQUIRED) == c


def test_unknown_keys_name_file_line_and_suggest(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """model:
  path: /m
data:
  train_files: [a.jsonl]
algorithm:
  clip_hihg: 0.3
clip_high: 0.3
""",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert f"{path}:6: unknown key 'algorithm.clip_hihg'. Did you mean 'algorithm.clip_high'?" in message
    assert f"{path}:7: unknown key 'clip_high'. Did you mean 'algorithm.clip_high'?" in message


def test_unknown_section_lists_the_valid_keys() -> None:
    with pytest.raises(ConfigError) as info:
        load_config(None, [*REQUIRED, "zzz.q=1"])
    assert (
        "override 'zzz.q=1': unknown key 'zzz'. Valid keys: seed, plugins, output_dir, model, data,"
        in str(info.value)
    )


def test_wrong_types_name_the_key_and_where(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """model:
  path: /m
data:
  train_files: [a.jsonl, 3]
  shuffle: maybe
rollout:
  n: 8.5
optim:
  betas: [0.9]
""",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path, ["algorithm.loss_agg_mode=token_mean", "trainer.max_steps=ten"])
    message = str(info.value)
    assert f"{path}:4: data.train_files[1] must be str, got 3" in message
    assert f"{path}:5: data.shuffle must be bool, got 'maybe'" in message
    assert f"{path}:7: rollout.n must be int, got 8.5" in message
    assert f"{path}:9: optim.betas must be a list of 2 values (float, float), got [0.9]" in message
    assert (
        "override 'algorithm.loss_agg_mode=token_mean': algorithm.loss_agg_mode must be one of 'token-mean', "
        "'seq-mean-token-mean', 'seq-mean-token-sum', 'seq-mean-token-sum-norm' (did you mean 'token-mean'?)"
        in message
    )
    assert "override 'trainer.max_steps=ten': trainer.max_steps must be int, got 'ten'" in message
    assert message.count("\n") == 6  # every problem reported at once, one line each


def test_bad_overrides_yaml_and_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="must look like key=value"):
        load_config(None, [*REQUIRED, "algorithm.clip_high"])
    with pytest.raises(ConfigError, match=r"seed is not a section, it cannot hold 'seed.value'"):
        load_config(None, [*REQUIRED, "seed.value=3"])
    with pytest.raises(ConfigError, match="cannot read config file .*missing.yaml"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match=r"bad.yaml:3: invalid YAML"):
        load_config(write(tmp_path, "model:\n  path: /m\n  - x\n", "bad.yaml"))
    with pytest.raises(ConfigError, match="must be a mapping of keys, got list"):
        load_config(write(tmp_path, "- a\n- b\n", "list.yaml"))
    path = write(tmp_path, "model:\n  path: /a\n  path: /b\n", "dup.yaml")
    with pytest.raises(ConfigError, match=r"dup.yaml:3: duplicate key 'model.path' \(first set on line 2\)"):
        load_config(path, ["data.train_files=[a]"])


def test_value_checks_name_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  path: /m\ndata:\n  train_files: [a]\nalgorithm:\n  clip_low: 1.5\n")
    with pytest.raises(ConfigError, match=rf"{path}:6: algorithm.clip_low must lie in \[0, 1\)"):
        load_config(path)
    cases = {
        "rollout.mix_policy_accuracy_threshold=0.5": "is set but rollout.enable_mix_policy is false",
        "data.source_mode=preprocessed_only": (
            "data.cache_dir is required when data.source_mode is preprocessed_only"
        ),
        "actor.global_batch_size=100": "actor.global_batch_size must divide data.rollout_batch_size (256)",
        "rollout.n=1": "rollout.n must be >= 2",
        "optim.grad_clip=0": "optim.grad_clip must be > 0 (or null",
        "trainer.log_completions=-1": "trainer.log_completions must be >= 0",
        "plugins=my_reward.py": "plugins must be a list",
    }
    for override, expected in cases.items():
        with pytest.raises(ConfigError) as info:
            load_config(None, [*REQUIRED, override])
        assert expected in str(info.value), override
    assert load_config(None, [*REQUIRED, "optim.grad_clip=null"]).optim.grad_clip is None


def test_required_keys() -> None:
    with pytest.raises(ConfigError) as info:
        load_config()
    assert "model.path is required" in str(info.value)
    assert "data.train_files give at least one training dataset file" in str(info.value)


def test_dump_round_trips(tmp_path: Path) -> None:
    c = load_config(
        None,
        [
            "model.path=/models/tiny",
            "data.train_files=[/data/train.jsonl]",
            "optim.lr=3e-7",
            "rollout.engine_options={tensor_parallel_size: 2}",
            f"output_dir={tmp_path / 'run'}",
        ],
    )
    text = dump_config(c)
    assert "betas:\n  - 0.9\n  - 0.999\n" in text
    assert load_config(write(tmp_path, text)) == c
    assert config_to_dict(c)["optim"]["betas"] == [0.9, 0.999]


def test_config_keys_cover_every_leaf() -> None:
    keys = {k.key: k for k in config_keys(TrainConfig)}
    assert keys["algorithm.clip_high"].default == 0.28 and keys["algorithm.clip_high"].type == "float"
    assert keys["optim.betas"].default == [0.9, 0.999]
    assert keys["data.source_mode"].type == "preprocessed_only \\| prefer_preprocessed \\| realtime_only"
    assert all(k.help for k in keys.values()), [k for k, v in keys.items() if not v.help]
    assert not [k for k in keys.values() if k.help.startswith("See ")]  # the rewards section's too

    def leaves(d: dict, prefix: str = "") -> list[str]:
        out = []
        for key, value in d.items():
            if isinstance(value, dict) and key not in (
                "engine_options",
                "options",
                "routes",
                "logger_options",
                "estimator_options",
                "loss_options",
            ):
                out += leaves(value, f"{prefix}{key}.")
            else:
                out.append(f"{prefix}{key}")
        return out

    assert list(keys) == leaves(config_to_dict(TrainConfig()))
    table = markdown_reference(TrainConfig)
    assert all(f"| `{key}` |" in table for key in keys)


def test_rewards_section_problems_are_reported_with_the_others(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "model:\n  path: /m\ndata:\n  train_files: [a]\n"
        "rewards:\n  accuracy_wieght: 0.8\n  threads: many\n  format:\n    think: requird\n"
        "  routes:\n    qa: [{reward: a, wieght: 2}]\nrollout:\n  nn: 4\n",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).splitlines()[1:] == [
        f"  {path}:6: unknown key 'rewards.accuracy_wieght'. Did you mean 'rewards.accuracy_weight'?",
        f"  {path}:7: rewards.threads must be int, got 'many'",
        f"  {path}:9: rewards.format.think must be one of 'optional', 'required' (did you mean 'required'?), "
        "got 'requird'",
        f"  {path}:10: rewards.routes.qa[0] must be {{reward: NAME, weight: W}} (did you mean 'weight' for "
        "'wieght'?), got {'reward': 'a', 'wieght': 2}",
        f"  {path}:13: unknown key 'rollout.nn'. Did you mean 'rollout.n'?",
    ]


def test_rewards_section_ranges_are_checked_like_any_section(tmp_path: Path) -> None:
    path = write(tmp_path, "rewards:\n  timeout: -1\n  routes:\n    Free Form: {a: -1, b: .nan}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, REQUIRED)
    assert str(info.value).splitlines()[1:] == [
        f"  {path}:2: rewards.timeout must be a positive number of seconds or null",
        f"  {path}:3: rewards.routes.free_form weight of 'a' must be a non-negative number, got -1.0",
        f"  {path}:3: rewards.routes.free_form weight of 'b' must be a non-negative number, got nan",
    ]
    with pytest.raises(ConfigError, match=r"rewards.accuracy_weight "
                       r"\+ format_weight must be 1 \(got 0.8 \+ 0.1\)"):  # fmt: skip
        load_config(None, [*REQUIRED, "rewards.accuracy_weight=0.8", "rewards.format_weight=0.1"])
    alone = load_config(None, [*REQUIRED, "rewards.accuracy_weight=0.8"]).rewards  # the other: 1 - it
    assert (alone.common_options()["accuracy_weight"], alone.common_options()["format_weight"]) == (
        0.8,
        pytest.approx(0.2),
    )
    with pytest.raises(ConfigError, match=r"rewards.format_weight must be in \[0, 1\]"):
        load_config(None, [*REQUIRED, "rewards.format_weight=1.5"])
    with pytest.raises(
        ConfigError, match=r"override 'rewards.routes={math: 3}': rewards.routes.math must be"
    ):
        load_config(None, [*REQUIRED, "rewards.routes={math: 3}"])


def test_route_shorthands_load_to_weighted_pairs_and_dump_loadable(tmp_path: Path) -> None:
    route = "{Free Form: open_ended, qa: [[a, 0.5], {reward: b}], mix: {a: 1, b: 3}}"
    config = load_config(None, [*REQUIRED, f"rewards.routes={route}"])
    assert config.rewards.routes == {
        "free_form": [("open_ended", 1.0)],
        "qa": [("a", 0.5), ("b", 1.0)],
        "mix": [("a", 1.0), ("b", 3.0)],
    }
    assert load_config(write(tmp_path, dump_config(config))).rewards == config.rewards
    with pytest.raises(
        ConfigError, match="'Free Form' and 'free_form' both name the problem type 'free_form'"
    ):
        load_config(None, [*REQUIRED, "rewards.routes={Free Form: a, free_form: b}"])


def test_load_rewards_reports_every_problem() -> None:
    with pytest.raises(ConfigError) as info:
        load_rewards({"thread": 2, "timeout": "soon", "options": {"math": 5}})
    assert str(info.value).splitlines()[1:] == [
        "  unknown key 'rewards.thread'. Did you mean 'rewards.threads'?",
        "  rewards.timeout must be float or null, got 'soon'",
        "  rewards.options.math must be a mapping of str to any value, got 5",
    ]


def _pairs(value: object, key: str) -> object:
    """``{name: weight}`` read as a list of pairs; anything else left for the type check."""
    if isinstance(value, dict) and value.get("bad"):
        raise ConfigError(f"{key} must not be bad")
    return list(value.items()) if isinstance(value, dict) else value


@dataclass
class _Routes:
    routes: list[tuple[str, float]] = option(  # noqa: RUF009
        factory=list, help="Weighted names.", convert=_pairs
    )


@dataclass
class _WithRoutes:
    section: _Routes = field(default_factory=_Routes)


def test_a_converter_reads_shorthands_before_the_type_check(tmp_path: Path) -> None:
    config = load_config(None, ["section.routes={a: 1}"], schema=_WithRoutes)
    assert config.section.routes == [("a", 1.0)]
    text = dump_config(config)
    assert text == "section:\n  routes:\n  - - a\n    - 1.0\n"
    assert load_config(write(tmp_path, text), schema=_WithRoutes) == config
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, "section:\n  routes: {bad: 1}\n  other: 1\n"), schema=_WithRoutes)
    assert "cfg.yaml:2: section.routes must not be bad" in str(info.value)
    assert "cfg.yaml:3: unknown key 'section.other'" in str(info.value)  # reported together
    with pytest.raises(ConfigError, match=r"section.routes\[0\] must be a list of 2 values \(str, float\)"):
        load_config(None, ["section.routes=[x]"], schema=_WithRoutes)


@dataclass
class _Inner:
    level: int = 1


@dataclass
class _Schema:
    name: str = "x"
    inner: _Inner = field(default_factory=_Inner)


def test_any_dataclass_schema_loads() -> None:
    assert load_config(None, ["inner.level=3"], schema=_Schema) == _Schema("x", _Inner(3))
    with pytest.raises(ConfigError, match="Did you mean 'inner.level'"):
        load_config(None, ["inner.levle=3"], schema=_Schema)


def test_an_unquoted_off_selects_the_literal_option_yaml_reads_as_false(tmp_path: Path) -> None:
    # YAML 1.1 reads off as false: the option named "off" is what the user wrote
    assert load_config(overrides=[*REQUIRED, "rollout.parity_check=off"]).rollout.parity_check == "off"
    path = write(tmp_path, "rollout:\n  parity_check: off\n")
    assert load_config(path, REQUIRED).rollout.parity_check == "off"
    with pytest.raises(ConfigError, match="rollout.parity_check"):
        load_config(overrides=[*REQUIRED, "rollout.parity_check=on"])  # no option reads as true


def test_benchmark_data_roots_are_relative_to_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    text = (
        "trainer:\n  benchmarks:\n    - {name: mvbench, data_root: data/mvbench}\n"
        "    - {name: vsibench, data_root: /abs/vsibench}\n"
    )
    config = load_config(write(tmp_path / "conf", text), REQUIRED)
    roots = [b.data_root for b in config.trainer.benchmarks]
    assert roots == [str(tmp_path / "conf" / "data" / "mvbench"), "/abs/vsibench"]
    again = load_config(write(tmp_path, dump_config(config), "dumped.yaml"))
    assert [b.data_root for b in again.trainer.benchmarks] == roots
