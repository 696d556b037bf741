"""Sequence parallelism (Ulysses) on gloo ranks against one process: log-probs and every gradient.

Run by ``test_sequence_parallel.py`` as ``python sp_step.py MODEL_DIR OUT_DIR K [--no-exchange]
[--tower-checks]``. ``K`` ranks form one sequence-parallel group and run the same packed
micro-batch (a text prompt, a long video prompt, a video-plus-image prompt, a two-video prompt), each
its ``1/K`` of the row and its share of the vision tower's temporal patches; the loss is the masked
sum of log-probs and entropies divided by ``K`` (as the update scales it), the gradients are summed
over the group; the sharded model recomputes its layers in the backward (gradient checkpointing).
Rank 0 also runs the micro-batch without sequence parallelism and writes both results to
``OUT_DIR`` (``sp.safetensors``, ``single.safetensors``) with ``rank0.json``: where the row was cut,
which tokens lie there; every rank writes how many patches its vision tower encoded.
``--no-exchange`` skips the all-to-all (the control that must fail). ``--tower-checks`` then runs a
micro-batch of one image prompt (one temporal patch: one rank encodes it, the others run the
tower's zero-weighted dummy), sharded and in one process (``sp_lone``, ``single_lone``), and the
first micro-batch again with the whole tower on every rank (a backend without the sharding hook,
``sp_whole_tower``) and without the all-gather of the tower's embeddings (each rank keeps its own,
zeros elsewhere: the other control, ``sp_no_tower_exchange``).
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from datetime import timedelta
from pathlib import Path
from typing import Any

ENTROPY_COEF = 0.1


def episodes(backend: Any) -> list[Any]:
    """The micro-batch: text, a 16-frame video (8 temporal patches of 16 visual tokens), a video and an
    image, two videos (fixed random responses); then the lone image prompt. The cut between two
    ranks lies inside a temporal patch of the long video."""
    import torch

    from videorl.data import Sample
    from videorl.encoding import Prompt
    from videorl.episode import Episode
    from videorl.media import VideoMetadata
    from videorl.model_inputs import PromptInput
    from videorl.rollout import Completion

    f = backend.factor
    gen = torch.Generator().manual_seed(0)

    def video(frames: int, side: int, seed: int) -> tuple[torch.Tensor, Any]:
        g = torch.Generator().manual_seed(seed)
        pixels = torch.randint(0, 256, (frames, 3, side * f, side * f), dtype=torch.uint8, generator=g)
        return pixels, VideoMetadata.every_frame(frames, side * f, side * f, fps=2.0)

    image = torch.randint(0, 256, (3, f, 2 * f), dtype=torch.uint8, generator=gen)
    prompts = [
        PromptInput("text", "How many objects are there? Answer with a number"),
        PromptInput("long", "What happens in the video?", videos=[video(16, 4, 1)]),
        PromptInput("both", "Does the image appear in the video?", videos=[video(4, 2, 2)], images=[image]),
        PromptInput("two", "Which video is longer?", videos=[video(2, 2, 3), video(4, 2, 4)]),
        PromptInput("lone", "What is in the image?", images=[image]),
    ]
    forbidden = backend.forbidden_token_ids()
    allowed = torch.tensor([i for i in range(len(backend.tokenizer)) if i not in forbidden])
    out = []
    for n, prompt in zip((4, 7, 3, 2, 3), prompts):
        response = allowed[torch.randint(0, len(allowed), (n,), generator=gen)].tolist()
        sample = Sample(id=prompt.sample_id, data_type=prompt.data_type, problem="q", problem_type="x")
        completion = Completion(response, [-1.0] * n, "stop")
        out.append(Episode(Prompt(sample, backend.encode(prompt), None), 0, completion))
    return out


def run(model: Any, backend: Any, batch: list[Any], size: int) -> dict[str, Any]:
    """Log-probs, entropies and the gradients of the scaled loss (summed over the group)."""
    import torch
    import torch.distributed as dist

    from videorl.actor.update import forward_responses

    model.zero_grad(set_to_none=True)
    logp, entropy, mask = forward_responses(model, backend, batch, [], entropy_grad=True, padding_free=True)
    (((logp + ENTROPY_COEF * entropy) * mask).sum() / size).backward()
    out = {"logp": (logp * mask).detach(), "entropy": (entropy * mask).detach()}
    for name, p in model.named_parameters():
        grad = p.grad if p.grad is not None else torch.zeros_like(p)
        if size > 1:
            dist.all_reduce(grad)
        out[f"grad/{name}"] = grad.detach().clone()
    return out


def cut_tokens(backend: Any, batch: list[Any], size: int) -> tuple[list[list[int]], list[int]]:
    """The packed row's tokens on either side of each cut between ranks, and how many video tokens
    run up to each cut."""
    from videorl.packing import pack_for_backend

    inputs = backend.collate([t.prompt.require_encoded() for t in batch], [t.response_ids for t in batch])
    ids = pack_for_backend(backend, inputs).input_ids[0].tolist()
    local = -(-len(ids) // size)
    cuts = [r * local for r in range(1, size)]
    video = backend.token_ids["video"]
    runs = [next(n for n in range(cut + 1) if n == cut or ids[cut - 1 - n] != video) for cut in cuts]
    return [ids[c - 1 : c + 1] for c in cuts], runs


def count_patches(model: Any) -> list[int]:
    """The patches each call of ``model``'s vision tower encodes (appended as it runs)."""
    calls: list[int] = []
    model.model.visual.register_forward_pre_hook(lambda m, args: calls.append(int(args[0].shape[0])))
    return calls


def _local_only(local: Any, group: Any, counts: list[int], rank: int) -> Any:
    """The control's all-gather: this rank's rows where they belong, zeros for the others'."""
    import torch

    start = sum(counts[:rank])
    zeros = local.new_zeros(sum(counts) - counts[rank], local.shape[-1])
    return torch.cat([zeros[:start], local, zeros[start:]])


def _rank(rank: int, size: int, init_file: str, model_dir: str, out_dir: str, flags: list[str]) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    out = Path(out_dir)
    result: dict[str, Any] = {"ok": False, "error": ""}
    try:
        from safetensors.torch import save_file

        from videorl.actor import tower_shard, ulysses
        from videorl.api import backend_for_model
        from videorl.plugins import load_plugins

        dist.init_process_group(
            "gloo",
            init_method=f"file://{init_file}",
            rank=rank,
            world_size=size,
            timeout=timedelta(seconds=60),
        )
        if "--no-exchange" in flags:  # the control: each rank attends over its own tokens only
            ulysses._AllToAll.apply = staticmethod(lambda x, group: x)  # type: ignore[method-assign]
        backend = backend_for_model(model_dir, load_plugins().model_backends)
        *batch, lone = episodes(backend)
        model = backend.load_model().train()
        # recomputed in the backward: the shard plan must reach the attention again
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        ulysses.install_sequence_parallel(model, backend, dist.group.WORLD, size, rank)
        patches = count_patches(model)
        sharded = run(model, backend, batch, size)
        result["tower_patches"] = list(patches)  # before the control runs
        if rank == 0:
            save_file(sharded, str(out / "sp.safetensors"))
            whole = backend.load_model().train()
            whole_patches = count_patches(whole)
            single = run(whole, backend, batch, 1)
            result["single_tower_patches"] = list(whole_patches)
            save_file(single, str(out / "single.safetensors"))
            result["cuts"], result["video_run"] = cut_tokens(backend, batch, size)
            result["video_id"] = backend.token_ids["video"]
        if "--tower-checks" in flags:
            before = len(patches)
            lone_sharded = run(model, backend, [lone], size)
            result["lone_tower_patches"] = patches[before:]
            if rank == 0:
                save_file(lone_sharded, str(out / "sp_lone.safetensors"))
                save_file(run(whole, backend, [lone], 1), str(out / "single_lone.safetensors"))
            installed = ulysses.sequence_parallel_of(model)
            assert installed is not None
            hook, installed.vision = installed.vision, None  # as a backend without the hook
            before = len(patches)
            whole_tower = run(model, backend, batch, size)
            result["whole_tower_patches"] = patches[before:]
            if rank == 0:
                save_file(whole_tower, str(out / "sp_whole_tower.safetensors"))
            installed.vision = hook
            # the control: each rank has the tower rows it encoded only
            tower_shard._GatherRows.apply = staticmethod(_local_only)  # type: ignore[method-assign]
            control = run(model, backend, batch, size)
            if rank == 0:
                save_file(control, str(out / "sp_no_tower_exchange.safetensors"))
        result.update(ok=True)
        dist.barrier()
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
    finally:
        (out / f"rank{rank}.json").write_text(json.dumps(result))
        if dist.is_initialized():
            dist.destroy_process_group()


def main(argv: list[str]) -> None:
    import torch.multiprocessing as mp

    model_dir, out_dir, size = argv[0], argv[1], int(argv[2])
    init_file = str(Path(out_dir) / "pg-init")
    mp.spawn(_rank, args=(size, init_file, model_dir, out_dir, argv[3:]), nprocs=size, join=True)


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main(sys.argv[1:])
