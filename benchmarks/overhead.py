"""The loop's cost: the demo's GRPO step through videorl against a bare PyTorch + transformers step.

Prints one JSON line. Both sides train the demo (``videorl demo``: a tiny random Qwen2.5-VL, 16 clips
× 8 responses per step, hf engine, float32 on CPU), each with its own copy of the same model and an
AdamW of the same settings, alternated in one process: videorl's step ``s`` runs in the real loop
(``build_training`` + ``Training.run``), then, inside its ``on_step``, the bare step ``s`` replays it:

- data:      the bare step renders the same prompts with the processor (chat template, the clip's
             frames decoded once at start, as a dataset would hold them; ``do_resize=False``,
             ``do_sample_frames=False``) and checks that they tokenise to videorl's prompt ids;
- rollout:   ``model.generate`` on the batch, ``num_return_sequences = n`` (as TRL does), forced by a
             logits processor to the token ids videorl's engine sampled (the engine's outputs are
             recorded by a wrapper), so both sides decode the same tokens;
- reward:    the demo's multiple-choice rule written out (0.9 × the letter of the last ``<answer>``, or
             of the bare text, + 0.1 × the tag there) on the responses videorl trained on (mix-policy's
             offline ones included);
- advantage: group mean and standard deviation;
- update:    one micro-batch of the same sequences (prompts left-padded, responses right-padded, as
             TRL does), ``logits_to_keep`` over the responses, TRL's selective log-softmax, the PPO
             loss with DAPO's clip-higher (token mean), gradient clipping at 1.0, one AdamW step.

Stages: videorl's ``time/*`` metrics (``data``, ``rollout``, ``reward``, ``actor``; ``step`` is the
loop's whole step), the bare step's around the same work. Each reports the median over the timed
steps (after ``--warmup`` untimed ones, where the parity check and first-call costs fall); ``ratio``
is videorl's median over the bare one. ``other`` is the step minus the four stages (videorl:
advantages, metrics, the loop; bare: advantages). The target is ``ratio.step <= 1.15``.

Usage: ``python benchmarks/overhead.py [--steps 8] [--warmup 2] [--threads 2] [--workdir DIR]``
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

STAGES = ("data", "rollout", "reward", "actor")


class RecordingEngine:
    """The run's rollout engine, keeping the completions of each ``generate`` call."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self.outputs: list[Any] = []

    def generate(self, prompts: Any, params: Any) -> Any:
        out = self.engine.generate(prompts, params)
        self.outputs.append(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.engine, name)


class TrainedLog:
    """Stands in for the run's completions log (``RunIO.completions``): keeps the trajectories each step
    trained on, in group order."""

    def __init__(self) -> None:
        self.flat: list[Any] = []

    def log(self, step: int, flat: Any, decode: Any) -> None:
        self.flat = list(flat)

    def close(self) -> None:
        pass


class Forced:
    """A transformers logits processor that makes ``generate`` pick the recorded token of every row."""

    def __init__(self, tokens: torch.Tensor, prompt_width: int) -> None:
        self.tokens, self.prompt_width = tokens, prompt_width

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        chosen = self.tokens[:, input_ids.shape[1] - self.prompt_width]
        forced = torch.full_like(scores, -math.inf)
        return forced.scatter_(1, chosen.unsqueeze(1), 0.0)


class BareStep:
    """A GRPO step written with PyTorch and transformers only (see the module docstring)."""

    def __init__(self, model_dir: Path, config: Any, frames: dict[str, torch.Tensor]) -> None:
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.processor = AutoProcessor.from_pretrained(model_dir)
        self.model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
        o = config.optim
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=o.lr, betas=tuple(o.betas), weight_decay=o.weight_decay
        )
        self.frames, self.n = frames, config.rollout.n
        self.clip = (config.algorithm.clip_low, config.algorithm.clip_high)
        tokenizer = self.processor.tokenizer
        self.pad = tokenizer.pad_token_id
        self.eos = self.model.generation_config.eos_token_id
        self.seconds: dict[str, float] = {}

    def _timed(self, stage: str) -> Any:
        bare = self

        class Timer:
            def __enter__(self) -> None:
                self.start = time.perf_counter()

            def __exit__(self, *exc: Any) -> None:
                bare.seconds[stage] = bare.seconds.get(stage, 0.0) + time.perf_counter() - self.start

        return Timer()

    def prompts(self, samples: list[Any]) -> dict[str, torch.Tensor]:
        from transformers.video_utils import VideoMetadata

        texts, videos, metas = [], [], []
        for s in samples:
            content = [
                {"type": "video"},
                {"type": "text", "text": s.problem + "\n" + "\n".join(s.options)},
            ]
            messages = [{"role": "user", "content": content}]
            texts.append(
                self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            )
            frames = self.frames[s.videos[0]]
            videos.append(frames)
            metas.append(
                VideoMetadata(total_num_frames=len(frames), fps=2.0, frames_indices=list(range(len(frames))))
            )
        self.processor.tokenizer.padding_side = "left"
        return self.processor(
            text=texts, videos=videos, video_metadata=metas, do_resize=False, do_sample_frames=False,
            padding=True, return_tensors="pt",
        )  # fmt: skip

    def step(
        self, samples: list[Any], sampled: list[list[Any]], trained: list[Any]
    ) -> dict[str, torch.Tensor]:
        """One step on ``samples``: ``sampled`` are the engine's completions (per prompt, ``n`` each),
        ``trained`` the trajectories videorl trained on. Returns the batch, for the identity check."""
        self.seconds = {}
        start = time.perf_counter()
        with self._timed("data"):
            batch = self.prompts(samples)
        with self._timed("rollout"):
            self._rollout(batch, [c.token_ids for group in sampled for c in group])
        with self._timed("reward"):
            texts = self.processor.tokenizer.batch_decode(
                [t.completion.token_ids for t in trained], skip_special_tokens=True
            )
            rewards = torch.tensor(
                [self._reward(text, t.prompt.sample.ground_truth) for text, t in zip(texts, trained)]
            )
        groups = rewards.view(-1, self.n)
        advantages = (
            (groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-6)
        ).flatten()
        with self._timed("actor"):
            self._update(batch, [t.completion.token_ids for t in trained], advantages)
        self.seconds["step"] = time.perf_counter() - start
        return batch

    @torch.no_grad()
    def _rollout(self, batch: dict[str, torch.Tensor], tokens: list[list[int]]) -> None:
        width = max(len(t) for t in tokens)
        forced = torch.full((len(tokens), width), self.pad if self.pad is not None else 0, dtype=torch.long)
        for row, ids in enumerate(tokens):
            forced[row, : len(ids)] = torch.tensor(ids)
        self.model.eval()
        out = self.model.generate(
            **batch, num_return_sequences=self.n, max_new_tokens=width, do_sample=True, top_k=None, top_p=1.0,
            logits_processor=[Forced(forced, batch["input_ids"].shape[1])], pad_token_id=self.pad,
        )  # fmt: skip
        got = out[:, batch["input_ids"].shape[1] :]
        for row, ids in enumerate(tokens):  # the replay decoded exactly the engine's tokens
            assert got[row, : len(ids)].tolist() == list(ids), (
                f"row {row}: replayed {got[row].tolist()}, want {ids}"
            )

    @staticmethod
    def _reward(text: str, truth: str) -> float:
        """0.9 × the letter of the last ``<answer>`` (of the text after any reasoning when there is none)
        being the truth, + 0.1 × the tag being there."""
        answers = re.findall(r"<answer>(.*?)</answer>", text, re.DOTALL)
        answer = answers[-1] if answers else text.rsplit("</think>", 1)[-1]
        letter = re.match(r"\s*\(?([A-Z])\b", answer)
        return 0.9 * float(letter is not None and letter.group(1) == truth.strip()) + 0.1 * bool(answers)

    def _update(
        self, batch: dict[str, torch.Tensor], responses: list[list[int]], advantages: torch.Tensor
    ) -> None:
        n, width = self.n, max(len(r) for r in responses)
        prompt_ids = batch["input_ids"].repeat_interleave(n, 0)
        prompt_mask = batch["attention_mask"].repeat_interleave(n, 0)
        completion = torch.full((len(responses), width), self.pad, dtype=torch.long)
        completion_mask = torch.zeros((len(responses), width), dtype=torch.long)
        for row, ids in enumerate(responses):
            completion[row, : len(ids)] = torch.tensor(ids)
            completion_mask[row, : len(ids)] = 1
        visual = {
            "pixel_values_videos": batch["pixel_values_videos"].view(len(batch["input_ids"]), -1,
                                                                      batch["pixel_values_videos"].shape[-1])
            .repeat_interleave(n, 0).flatten(0, 1),
            "video_grid_thw": batch["video_grid_thw"].repeat_interleave(n, 0),
        }  # fmt: skip
        if "second_per_grid_ts" in batch:
            visual["second_per_grid_ts"] = batch["second_per_grid_ts"].repeat_interleave(n, 0)
        self.model.train()
        logits = self.model(
            input_ids=torch.cat([prompt_ids, completion], 1),
            attention_mask=torch.cat([prompt_mask, completion_mask], 1),
            logits_to_keep=width + 1, use_cache=False, **visual,
        ).logits[:, :-1]  # fmt: skip
        # TRL's selective log-softmax: the chosen logit minus the log-sum-exp, no B×T×V log-probs
        logits = logits.float()
        logp = logits.gather(-1, completion.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, -1)
        ratio = torch.exp(logp - logp.detach())
        adv = advantages.unsqueeze(1)
        low, high = self.clip
        per_token = -torch.min(ratio * adv, torch.clamp(ratio, 1 - low, 1 + high) * adv)
        mask = completion_mask.float()
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def decode_clip(path: str) -> torch.Tensor:
    """Every frame of ``path`` as a ``T×3×H×W`` uint8 tensor (the demo's clips: 4 frames at 2 fps)."""
    import av

    with av.open(path) as container:
        frames = [torch.from_numpy(f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
    return torch.stack(frames).permute(0, 3, 1, 2).contiguous()


def summarise(rows: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Per side, the median seconds of each stage and of the step over the timed steps (``rows``:
    ``{"videorl": {stage: s}, "bare": {stage: s}}`` per step), ``other`` (the step minus the stages), and
    videorl's median over the bare one per stage."""
    seconds: dict[str, dict[str, float]] = {}
    for side in ("videorl", "bare"):
        seconds[side] = {s: statistics.median(r[side].get(s, 0.0) for r in rows) for s in (*STAGES, "step")}
        seconds[side]["other"] = statistics.median(
            r[side]["step"] - sum(r[side].get(s, 0.0) for s in STAGES) for r in rows
        )
    ratio = {
        s: seconds["videorl"][s] / seconds["bare"][s] if seconds["bare"][s] > 0 else None
        for s in (*STAGES, "other", "step")
    }
    return {"seconds": seconds, "ratio": ratio}


def main() -> None:
    from videorl import demo
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="timed steps")
    parser.add_argument(
        "--warmup", type=int, default=2, help="untimed steps first (parity check, first calls)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--workdir", type=Path, default=None, help="keep the demo's model, clips and cache here"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    plugins = load_plugins()
    with tempfile.TemporaryDirectory(prefix="videorl-overhead-") as tmp:
        work = args.workdir or Path(tmp)
        total = args.warmup + args.steps
        model, train, val = demo.prepare(work, plugins, family="qwen2_5_vl", seed=args.seed, train=96, val=4,
                                         task=demo.DEFAULT_TASK)  # fmt: skip
        run_dir = work / "runs" / "overhead"
        shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run each time (--workdir keeps the rest)
        overrides = demo.demo_overrides(work, model, train, val, steps=total, seed=args.seed, engine="hf")
        config = load_config(None, [*overrides, "trainer.val_every=0", f"trainer.save_every={total}",
                                    f"output_dir={run_dir}"])  # fmt: skip
        training = build_training(config, plugins)
        engine, trained = RecordingEngine(training.engine), TrainedLog()
        training = replace(training, engine=engine, io=replace(training.io, completions=trained))
        frames = {path: decode_clip(path) for path in sorted({s.videos[0] for s in training.data.samples})}
        bare = BareStep(model, config, frames)
        rows: list[dict[str, Any]] = []

        def on_step(step: int, metrics: dict[str, float]) -> None:
            flat = trained.flat
            prompts = [flat[g * config.rollout.n].prompt for g in range(len(flat) // config.rollout.n)]
            batch = bare.step([p.sample for p in prompts], engine.outputs[0], flat)  # [0]: the rollout's
            if step == 1:  # the same prompts: the bare processor's ids are videorl's prompt ids
                for row, p in enumerate(prompts):
                    ids = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
                    want, decode = p.require_encoded().prompt_ids, bare.processor.tokenizer.decode
                    assert ids == want, f"prompt {p.sample.id}: {decode(ids)!r}, videorl: {decode(want)!r}"
            engine.outputs.clear()
            if step > args.warmup:
                videorl = {s: metrics.get(f"time/{s}", 0.0) for s in (*STAGES, "step")}
                rows.append({"videorl": videorl, "bare": dict(bare.seconds)})

        training.run(on_step=on_step)
    summary = summarise(rows)
    print(json.dumps({
        "benchmark": "overhead", "steps": args.steps, "warmup": args.warmup, "threads": args.threads,
        **summary, "target": {"step": 1.15},
        "setup": {"model": "tiny qwen2_5_vl (the demo's)", "device": "cpu", "prompts_per_step": 16,
                  "n": config.rollout.n, "dtype": "float32"},
    }))  # fmt: skip


if __name__ == "__main__":
    main()
