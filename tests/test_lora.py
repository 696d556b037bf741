"""LoRA training (``actor.lora``): adapters only train and are checkpointed, the reference is the base
model exactly, resume is bit-identical, and the run exports as a merged model or a PEFT adapter, which
``videorl eval run`` takes; the same under FSDP2 (two CPU ranks) and with vLLM's merged-weight refresh.

The module's run is a real two-step ``videorl train`` of the demo task (tiny Qwen2.5-VL), with the KL
penalty on and a checkpoint after each step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("peft")

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from videorl.cli import make_cli
    from videorl.plugins import load_plugins

    return CliRunner().invoke(make_cli(load_plugins()), list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from videorl import demo
    from videorl.plugins import load_plugins

    out = tmp_path_factory.mktemp("lora")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=2, val=1)
    return {"task": out, "model": model, "train": train, "val": val}


@pytest.fixture(scope="module")
def run(lora_overrides: Callable[..., list[str]], task: dict[str, Path]) -> Path:
    """``videorl train`` (the CLI) with LoRA, two steps, a checkpoint after each."""
    run = task["task"] / "run"
    config = task["task"] / "train.yaml"
    config.write_text("actor:\n  lora:\n    enabled: true\n")
    overrides = lora_overrides(task["task"], task["model"], task["train"], task["val"], run)
    result = _cli("train", str(config), *overrides)
    assert result.exit_code == 0, result.output
    return run


def _trained(run: Path, step: int, out: Path) -> Any:
    """A training built from ``run``'s config (into ``out``) holding the adapters of checkpoint ``step``."""
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.runs.checkpoint import CheckpointManager
    from videorl.train.compose import build_training

    training = build_training(load_config(run / "config.yaml", [f"output_dir={out}"]), load_plugins())
    ckpt = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / f"step_{step:06d}")
    ckpt.load_into(training.actor.checkpoint_state(), training.dist)
    return training


def _answer_logprobs(training: Any, model: Any) -> Any:
    """Per-token log-probs of the validation prompts' offline answers under ``model`` (teacher-forced)."""
    import torch

    from videorl.model_inputs import response_logprobs

    backend = training.actor.backend
    prompts = training.validation
    tokenizer = backend.processor.tokenizer
    answers = [tokenizer.encode(p.sample.offline_output, add_special_tokens=False) for p in prompts]
    inputs = backend.collate([p.require_encoded() for p in prompts], answers)
    with torch.no_grad():
        logits = model(**inputs.model_kwargs()).logits
    return response_logprobs(logits, inputs, forbidden=backend.forbidden_token_ids())[
        inputs.response_mask.bool()
    ]


def _linear_shapes(model_dir: Path) -> dict[str, tuple[int, int]]:
    """``{module name: (out, in)}`` of every linear layer of the base model."""
    import torch

    from videorl.backend import backend_for_model
    from videorl.plugins import load_plugins

    model = backend_for_model(model_dir, load_plugins().model_backends).load_model(device="meta")
    return {n: tuple(m.weight.shape) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}


# --- the adapters ---------------------------------------------------------------------------------


def test_only_the_language_models_adapters_train_and_the_optimizer_holds_only_them(
    lora_overrides: Callable[..., list[str]], task: dict[str, Path], tmp_path: Path
) -> None:
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    overrides = lora_overrides(task["task"], task["model"], task["train"], task["val"], tmp_path / "run")
    actor = build_training(load_config(None, overrides), load_plugins()).actor
    assert actor.lora is not None and actor.reference is None  # the KL is on, yet no reference copy
    trainable = {n: p for n, p in actor.model.named_parameters() if p.requires_grad}
    layers = {n: s for n, s in _linear_shapes(task["model"]).items() if n.rsplit(".", 1)[-1] in TARGETS}
    layers = {n: s for n, s in layers.items() if not n.startswith("model.visual.")}  # the tower is frozen
    assert len(layers) == 2 * len(TARGETS)  # two decoder layers
    expected = {f"{n}.lora_{ab}.default.weight": s for n, s in layers.items() for ab in "AB"}
    assert set(trainable) == set(expected)
    for name, (out, inp) in layers.items():  # rank 4: A is 4 × in, B is out × 4
        assert tuple(trainable[f"{name}.lora_A.default.weight"].shape) == (4, inp)
        assert tuple(trainable[f"{name}.lora_B.default.weight"].shape) == (out, 4)
    optimized = [p for group in actor.optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in optimized} == {id(p) for p in trainable.values()}
    assert all(p.dtype.is_floating_point and p.dtype.itemsize == 4 for p in optimized)  # float32


def test_the_vision_tower_can_be_adapted_and_bad_settings_are_refused(
    lora_overrides: Callable[..., list[str]], task: dict[str, Path], tmp_path: Path
) -> None:
    from videorl.config import load_config
    from videorl.errors import ConfigError
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    base = lora_overrides(task["task"], task["model"], task["train"], task["val"], tmp_path / "run")
    actor = build_training(
        load_config(None, [*base, "actor.lora.vision_tower=adapted"]), load_plugins()
    ).actor
    tower = {n for n in _linear_shapes(task["model"]) if n.startswith("model.visual.")}
    adapted = {n.rsplit(".lora_", 1)[0] for n, p in actor.model.named_parameters() if p.requires_grad}
    assert tower and tower <= adapted  # every linear layer of the tower, its merger included

    with pytest.raises(ConfigError) as bad:
        load_config(
            None, [*base, "actor.lora.rank=0", "actor.lora.dropout=1", "actor.lora.target_modules=[a.b]"]
        )
    for key in ("actor.lora.rank must be >= 1", "actor.lora.dropout must lie in [0, 1)", "not paths"):
        assert key in str(bad.value)
    with pytest.raises(ConfigError, match=r"qkv_proj name no linear layer .* its linear layers: down_proj"):
        build_training(
            load_config(None, [*base, "actor.lora.target_modules=[q_proj, qkv_proj]"]), load_plugins()
        )


def test_the_merged_weight_is_the_base_plus_scaled_b_times_a(task: dict[str, Path]) -> None:
    """``Adapters.merged`` by hand: ``W + (alpha / r) · B @ A`` under the base model's names."""
    import torch

    from videorl.actor.lora import inject
    from videorl.backend import backend_for_model
    from videorl.config.schema import LoraConfig
    from videorl.plugins import load_plugins

    model = backend_for_model(task["model"], load_plugins().model_backends).load_model()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    adapters = inject(model, LoraConfig(enabled=True, rank=2, alpha=6.0))
    with torch.no_grad():
        for p in adapters.parameters():
            p.normal_()
    state = model.state_dict()
    merged = adapters.merged(state)
    assert merged.keys() == base.keys()
    name = "model.language_model.layers.1.mlp.up_proj"
    a, b = state[f"{name}.lora_A.default.weight"], state[f"{name}.lora_B.default.weight"]
    torch.testing.assert_close(merged[f"{name}.weight"], base[f"{name}.weight"] + 3.0 * b @ a)
    assert torch.equal(
        merged["model.visual.blocks.0.attn.qkv.weight"], base["model.visual.blocks.0.attn.qkv.weight"]
    )
    assert (
        merged[f"{name}.weight"].dtype == torch.float32
        and adapters.merged(state, torch.bfloat16)[f"{name}.weight"].dtype == torch.bfloat16
    )


# --- a LoRA run -----------------------------------------------------------------------------------


def test_cli_train_checkpoints_hold_the_adapters_and_their_optimizer_states_only(run: Path) -> None:
    from videorl.runs.checkpoint import CheckpointManager
    from videorl.runs.history import read_metrics

    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    # the reference is the policy until the first update, then they part
    assert rows[0]["actor/kl"] == 0.0 and rows[1]["actor/kl"] > 0
    layers = [n for n in _linear_shapes(run.parent / "model") if n.rsplit(".", 1)[-1] in TARGETS]
    names = {
        f"{n}.lora_{ab}.default.weight" for n in layers if not n.startswith("model.visual.") for ab in "AB"
    }
    ckpt = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / "step_000002")
    assert set(ckpt.model_state()) == names
    optimizer = ckpt.optimizer_state()
    assert optimizer is not None and len(optimizer["state"]) == len(names)  # AdamW moments of the adapters


def test_the_reference_is_the_base_model_exactly(run: Path, tmp_path: Path) -> None:
    """With trained adapters, the actor's reference policy (its adapters off) gives the base model's
    logits bit for bit, and the policy's afterwards are the adapted ones again."""
    import torch

    training = _trained(run, 2, tmp_path / "check")
    base = training.actor.backend.load_model(dtype=torch.float32)
    with training.actor.reference_policy() as reference:
        assert reference is training.actor.model  # the same module: no second copy
        off = _answer_logprobs(training, reference)
    assert torch.equal(off, _answer_logprobs(training, base))
    on = _answer_logprobs(training, training.actor.model)
    assert (on - off).abs().max() > 1e-3
    assert all(p.requires_grad for p in training.actor.lora.parameters())


def test_resume_auto_continues_bit_for_bit(
    lora_overrides: Callable[..., list[str]], run: Path, task: dict[str, Path], tmp_path: Path
) -> None:
    import shutil

    import torch

    from videorl.runs.checkpoint import CheckpointManager

    again = tmp_path / "again"
    shutil.copytree(run, again)
    shutil.rmtree(again / "checkpoints" / "step_000002")
    (again / "checkpoints" / "latest").write_text("step_000001\n")
    config = task["task"] / "train.yaml"
    overrides = lora_overrides(task["task"], task["model"], task["train"], task["val"], again)
    result = _cli("train", str(config), *overrides, "--resume", "auto")
    assert result.exit_code == 0, result.output
    first = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / "step_000002")
    second = CheckpointManager(again / "checkpoints").load(again / "checkpoints" / "step_000002")
    a, b = first.model_state(), second.model_state()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    oa, ob = first.optimizer_state(), second.optimizer_state()
    assert oa is not None and ob is not None
    for key, state in oa["state"].items():
        assert all(torch.equal(v, ob["state"][key][n]) for n, v in state.items() if torch.is_tensor(v))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("actor.lora.rank=8", r"tensor\(s\) have another shape \(model\.\S+lora_A\.default\.weight: \[4, "),
        ("actor.lora.enabled=false", r"key\(s\) of this run are not in it"),
    ],
)
def test_resuming_with_other_lora_settings_says_so_not_corrupt(
    run: Path, tmp_path: Path, change: str, says: str
) -> None:
    """A LoRA checkpoint resumed with another rank, or by a full fine-tuning run: the error names the
    keys or shapes and actor.lora, and the checkpoint is not called corrupt."""
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.runs.checkpoint import CheckpointError, CheckpointManager
    from videorl.train.compose import build_training

    config = load_config(run / "config.yaml", [f"output_dir={tmp_path / 'other'}", change])
    training = build_training(config, load_plugins())
    ckpt = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / "step_000002")
    with pytest.raises(CheckpointError, match=says) as raised:
        ckpt.load_into(training.actor.checkpoint_state(), training.dist)
    assert "actor.lora" in str(raised.value) and "corrupt" not in str(raised.value)


def test_export_merged_loads_with_from_pretrained_and_gives_the_trained_logprobs(
    run: Path, tmp_path: Path
) -> None:
    import torch
    from transformers import AutoModelForImageTextToText

    result = _cli("export", str(run), str(tmp_path / "merged"))
    assert result.exit_code == 0, result.output
    model = AutoModelForImageTextToText.from_pretrained(str(tmp_path / "merged"), dtype=torch.float32)
    assert not any("lora" in name for name in model.state_dict())
    training = _trained(run, 2, tmp_path / "check")
    model = training.actor.backend.prepare_model(model)  # the positions vLLM computes, as the actor's
    trained = _answer_logprobs(training, training.actor.model)
    torch.testing.assert_close(_answer_logprobs(training, model), trained, atol=1e-5, rtol=0)
    base = _answer_logprobs(training, training.actor.backend.load_model(dtype=torch.float32))
    assert (trained - base).abs().max() > 1e-3  # the adapters changed the policy


def test_export_adapter_loads_with_peft_and_gives_the_trained_logprobs(run: Path, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel

    out = tmp_path / "adapter"
    result = _cli("export", str(run), str(out), "--adapter")
    assert result.exit_code == 0, result.output
    config = json.loads((out / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (4, 32.0, "LORA")
    assert Path(config["base_model_name_or_path"]) == (run.parent / "model").resolve()
    training = _trained(run, 2, tmp_path / "check")
    base = training.actor.backend.load_model(dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(out))
    loaded = {n for n, _ in model.named_parameters() if "lora_" in n}
    assert len(loaded) == len(training.actor.lora.names)
    trained = _answer_logprobs(training, training.actor.model)
    torch.testing.assert_close(_answer_logprobs(training, model), trained, atol=1e-5, rtol=0)


def test_exports_of_a_bfloat16_run_are_bfloat16(run: Path, tmp_path: Path) -> None:
    """The run's checkpoints with model.dtype bfloat16 in its config.yaml: the merged export is the base
    in bfloat16 plus the float32 update, rounded once to bfloat16 (as the engine's refresh), and
    config.json says bfloat16; the adapter export holds the adapters in bfloat16; --dtype float32 keeps
    the float32 merge."""
    import shutil

    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForImageTextToText

    from videorl.backend import backend_for_model
    from videorl.config import dump_config, load_config
    from videorl.plugins import load_plugins
    from videorl.runs.checkpoint import CheckpointManager

    bf16 = tmp_path / "bf16-run"
    shutil.copytree(run, bf16)
    config = load_config(run / "config.yaml", ["model.dtype=bfloat16"])
    (bf16 / "config.yaml").write_text(dump_config(config, bf16))
    checkpoint = bf16 / "checkpoints" / "step_000002"
    adapters = CheckpointManager(checkpoint.parent).load(checkpoint).model_state()
    assert all(t.dtype == torch.float32 for t in adapters.values())
    backend = backend_for_model(run.parent / "model", load_plugins().model_backends)
    base = backend.load_model(dtype=torch.float32).state_dict()  # the base model's float32 weights

    assert _cli("export", str(bf16), str(tmp_path / "merged")).exit_code == 0
    merged = load_file(str(tmp_path / "merged" / "model.safetensors"))
    assert all(t.dtype == torch.bfloat16 for t in merged.values() if t.is_floating_point())
    name = "model.language_model.layers.1.mlp.up_proj"
    a, b = adapters[f"{name}.lora_A.default.weight"], adapters[f"{name}.lora_B.default.weight"]
    scale = 32.0 / 4  # alpha / rank
    update = b @ a * scale
    assert update.abs().max() > 0  # trained
    expected = (base[f"{name}.weight"].to(torch.bfloat16).float() + update).to(torch.bfloat16)
    assert torch.equal(merged[f"{name}.weight"], expected)
    tower = "model.visual.blocks.0.attn.qkv.weight"
    assert torch.equal(merged[tower], base[tower].to(torch.bfloat16))
    assert json.loads((tmp_path / "merged" / "config.json").read_text())["dtype"] == "bfloat16"
    model = AutoModelForImageTextToText.from_pretrained(str(tmp_path / "merged"), dtype="auto")
    assert model.dtype == torch.bfloat16

    assert _cli("export", str(bf16), str(tmp_path / "merged32"), "--dtype", "float32").exit_code == 0
    merged32 = load_file(str(tmp_path / "merged32" / "model.safetensors"))
    expected32 = base[f"{name}.weight"].to(torch.bfloat16).float() + update
    assert torch.equal(merged32[f"{name}.weight"], expected32)

    assert _cli("export", str(bf16), str(tmp_path / "adapter"), "--adapter").exit_code == 0
    saved = load_file(str(tmp_path / "adapter" / "adapter_model.safetensors"))
    want = {f"base_model.model.{k}".replace(".default.", "."): v for k, v in adapters.items()}
    assert saved.keys() == want.keys()
    assert all(t.dtype == torch.bfloat16 for t in saved.values())
    assert all(torch.equal(t, want[k].to(torch.bfloat16)) for k, t in saved.items())


def test_export_adapter_of_a_full_fine_tuning_run_is_refused(
    lora_overrides: Callable[..., list[str]], task: dict[str, Path], tmp_path: Path
) -> None:
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    full = tmp_path / "full"
    overrides = lora_overrides(task["task"], task["model"], task["train"], task["val"], full)
    overrides += ["actor.lora.enabled=false", "trainer.max_steps=1", "algorithm.use_kl_loss=false"]
    build_training(load_config(None, overrides), load_plugins()).run()
    result = _cli("export", str(full), str(tmp_path / "out"), "--adapter")
    assert result.exit_code != 0
    assert "actor.lora.enabled: true" in result.output and not (tmp_path / "out").exists()


BENCHMARK = '''
from pathlib import Path

from videorl.api import BenchmarkRow, benchmark_summary, hookimpl, mean


class Letters:
    """Two text questions from letters.txt (one per line); the answer is the response's first token."""

    name = "letters"

    def load(self, data_root):
        lines = (Path(data_root) / "letters.txt").read_text().split()
        return [BenchmarkRow(f"q{i}", "Which letter?", answer) for i, answer in enumerate(lines)]

    def build_prompt(self, row, *, family, thinking):
        return row.problem

    def extract(self, row, response):
        return response.strip()[:1] or None

    def score(self, row, prediction):
        return float(prediction == row.answer)

    def aggregate(self, rows, scores):
        return benchmark_summary(mean(scores), {})


@hookimpl
def register_benchmarks(register):
    register("letters", Letters)
'''


def test_eval_run_takes_an_adapter_folder(
    run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Any
) -> None:
    """``--model ADAPTER`` merges the adapter into the base its config names (``RUN/model``), which the
    engine loads: the weights are the merged export's; the same adapter again reuses the merge."""
    import torch
    from safetensors.torch import load_file

    (tmp_path / "letters_plugin.py").write_text(BENCHMARK)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "letters.txt").write_text("A\nB\n")
    assert _cli("export", str(run), str(tmp_path / "adapter"), "--adapter").exit_code == 0
    assert _cli("export", str(run), str(tmp_path / "merged")).exit_code == 0
    out = tmp_path / "eval"
    args = ["--plugin", "letters_plugin", "eval", "run", "--benchmark", "letters", "--data-root",
            str(tmp_path / "data"), "--out", str(out), "--max-tokens", "2", "--quiet",
            "--model", str(tmp_path / "adapter")]  # fmt: skip
    result = run_cli(*args)
    result.assert_success()
    assert "merged the adapter" in result.output
    evaluated = load_file(str(out / "model" / "model.safetensors"))
    merged = load_file(str(tmp_path / "merged" / "model.safetensors"))
    assert evaluated.keys() == merged.keys()
    for name, tensor in merged.items():
        torch.testing.assert_close(evaluated[name], tensor, atol=1e-6, rtol=0, msg=name)
    assert (out / "results.json").is_file()
    again = run_cli(*args)
    again.assert_success()
    assert "merged the adapter" not in again.output


def test_the_config_snippet_of_the_docs_loads(tmp_path: Path) -> None:
    """docs/training.md's LoRA section: its YAML is a valid config with LoRA on."""
    from videorl.config import load_config

    doc = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text(encoding="utf-8")
    section = doc.split("\n## LoRA\n", 1)[1]
    snippet = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    config_file = tmp_path / "lora.yaml"
    config_file.write_text(snippet)
    config = load_config(
        config_file, [f"model.path={tmp_path}", f"data.train_files=[{tmp_path / 't.jsonl'}]"]
    )
    lora = config.actor.lora
    assert lora.enabled and (lora.rank, lora.alpha, lora.vision_tower) == (16, 32.0, "frozen")
    assert lora.target_modules == list(TARGETS)


# --- FSDP2 and vLLM -------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_fsdp_ranks_train_the_adapters_and_their_engines_get_the_merged_weights(
    lora_overrides: Callable[..., list[str]], task: dict[str, Path], tmp_path: Path
) -> None:
    """torchrun, two CPU ranks (gloo): the adapters shard with their layers (injected before sharding),
    the reference forward runs on the same sharded module, each rank's HF engine copy is refreshed with
    the merged weights, the checkpoint holds the adapters, and a resume repeats step 2 bit for bit."""
    import torch
    from safetensors.torch import load_file

    from videorl.runs.checkpoint import CheckpointManager

    run, dumps = tmp_path / "run", tmp_path / "dumps"
    dumps.mkdir()
    overrides = lora_overrides(
        task["task"], task["model"], task["train"], task["val"], run, "data.val_files=[]"
    )
    done = _torchrun(dumps, overrides)
    assert done.returncode == 0, done.stderr[-4000:]
    steps = [json.loads((dumps / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert steps[0] == steps[1] and steps[0][0]["actor/kl"] == 0.0 and steps[0][1]["actor/kl"] > 0
    ckpt = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / "step_000002")
    adapters = ckpt.model_state()
    assert adapters and all(".lora_" in name for name in adapters)
    merged = load_file(str(dumps / "rank0-merged.safetensors"))
    for r in (0, 1):  # each rank's engine copy holds the merged weights after the last step
        engine = load_file(str(dumps / f"rank{r}-engine.safetensors"))
        assert engine.keys() == merged.keys()
        assert all(torch.equal(engine[k], merged[k]) for k in merged), f"rank {r}'s engine"
    name = "model.language_model.layers.0.self_attn.q_proj"
    from videorl.backend import backend_for_model
    from videorl.plugins import load_plugins

    base = backend_for_model(task["model"], load_plugins().model_backends).load_model().state_dict()
    a, b = adapters[f"{name}.lora_A.default.weight"], adapters[f"{name}.lora_B.default.weight"]
    torch.testing.assert_close(merged[f"{name}.weight"], base[f"{name}.weight"] + (32.0 / 4) * b @ a)

    done = _torchrun(dumps, [*overrides, f"trainer.resume={run / 'checkpoints' / 'step_000001'}"])
    assert done.returncode == 0, done.stderr[-4000:]
    again = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / "step_000002").model_state()
    assert all(torch.equal(again[k], adapters[k]) for k in adapters)


def _torchrun(dumps: Path, overrides: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         __file__, str(dumps), *overrides],
        capture_output=True, text=True, timeout=420, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip


def _rank_main(dumps: Path, overrides: list[str]) -> None:
    """One torchrun rank: train as ``videorl train`` does, then dump its engine copy and merged weights."""
    from safetensors.torch import save_file

    from videorl.config import load_config
    from videorl.parallel import init_distributed
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    dist = init_distributed()
    training = build_training(load_config(None, overrides), load_plugins(), dist=dist)
    steps: list[dict[str, Any]] = []
    training.run(on_step=lambda step, m: steps.append({"step": step, "actor/kl": m["actor/kl"]}))
    engine = training.engine.model  # type: ignore[attr-defined]
    save_file(
        {k: v.contiguous() for k, v in engine.state_dict().items()},
        str(dumps / f"rank{dist.rank}-engine.safetensors"),
    )
    merged = training.actor.weights()
    if dist.rank == 0:
        save_file({k: v.contiguous() for k, v in merged.items()}, str(dumps / "rank0-merged.safetensors"))
    (dumps / f"rank{dist.rank}.json").write_text(json.dumps(steps))


# The vLLM engine refreshed with the merged adapters: tests/test_train_vllm.py (one subprocess for its
# training runs with vLLM).


@pytest.mark.slow
def test_ray_workers_train_the_adapters(
    lora_overrides: Callable[..., list[str]], task: dict[str, Path], tmp_path: Path
) -> None:
    """``videorl train --ray`` (two colocated CPU actor workers): the workers build the actor through the
    same ``make_actor``, so they train adapters, take the reference with the adapters off and write
    adapter-only checkpoints."""
    pytest.importorskip("ray")
    from videorl.runs.checkpoint import CheckpointManager
    from videorl.runs.history import read_metrics

    run = tmp_path / "run"
    config = tmp_path / "train.yaml"
    config.write_text("ray:\n  actor_workers: 2\n")
    overrides = lora_overrides(task["task"], task["model"], task["train"], task["val"], run)
    done = subprocess.run(
        [sys.executable, "-m", "videorl.cli", "train", str(config), *overrides, "--ray"],
        capture_output=True, text=True, timeout=540, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["actor/kl"] == 0.0 and rows[1]["actor/kl"] > 0
    ckpt = CheckpointManager(run / "checkpoints").load(run / "checkpoints" / "step_000002")
    state = ckpt.model_state()
    assert state and all(".lora_" in name for name in state)


if __name__ == "__main__":
    _rank_main(Path(sys.argv[1]), sys.argv[2:])
