"""Sequence parallelism (DeepSpeed-Ulysses) for the actor's padding-free forward.

The ``k`` ranks of a sequence-parallel group run the same micro-batch. Each holds a contiguous
``1/k`` of its packed row (:mod:`videorl.packing`; the row's length rounded up to a multiple of
``k`` with tokens that attend nowhere and are never read) through the language model's decoder
layers, so every activation of the stack shrinks by ``k``. Attention needs the whole sequence: an
all-to-all turns "my tokens, all heads" into "all tokens, my ``1/k`` of the heads", the model's own
attention (:mod:`videorl.packed_attention` per packed sequence, or flash-attention's varlen kernel)
runs on the full row with the full row's sequence boundaries, and a second all-to-all turns it back.
``k`` must divide the query heads; the key/value heads are split as they are when ``k`` divides
them, repeated to one per query head otherwise.

Positions are the packed row's (each family's M-RoPE, built once for the whole row by its
``pack_inputs``) and each rank takes its slice, as it takes its slice of the input embeddings. The
vision tower runs sharded by temporal patches when the backend has ``sequence_parallel_vision``
(:mod:`videorl.actor.tower_shard`: each rank encodes about ``1/k`` of the patches, the embeddings
are all-gathered); without it, whole on every rank of the group (the embeddings are sliced after the
merge): correct, gradients included, but its activations do not shrink.

After the decoder stack the hidden states of the response positions (the only ones the LM head
needs) are summed over the group, each rank contributing those it holds, so every rank computes
the same log-probs. The gradient reaching each rank's parameters is that of its own tokens; summed
over the group it is the whole sequence's. FSDP averages over all ``world`` ranks, and the update
divides each loss by the token count summed over all ranks (each group counts its samples ``k``
times): together the step equals the one at ``k = 1`` on the same global batch.

A backend opts in with ``sequence_parallel_text_model(model)`` (the decoder stack whose
``inputs_embeds`` and ``position_ids`` are sliced) or declines with ``sequence_parallel_unsupported``
(the reason); ``sequence_parallel_vision(model, shard)`` (a context manager around each sharded
forward) shards its tower.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as tdist

from videorl.actor.tower_shard import TowerShard
from videorl.backend import shards_vision_tower
from videorl.errors import ConfigError
from videorl.packed_attention import PACKED_SDPA

if TYPE_CHECKING:
    from videorl.packing import PackedInputs

__all__ = ["ULYSSES", "SequenceParallel", "install_sequence_parallel", "sequence_parallel_of", "valid_sizes"]

ULYSSES = "videorl_ulysses"
#: the keyword that carries a forward's :class:`ShardPlan` from the decoder stack to each attention
#: call (kept by gradient checkpointing's recomputation, which reruns a layer with its arguments)
PLAN_KWARG = "videorl_shard_plan"
#: the attention implementations that keep packed sequences apart from the position counters alone
INNER = (PACKED_SDPA, "flash_attention_2", "flash_attention_3")
_MODEL_ATTR = "_videorl_sequence_parallel"
#: the attention implementation each switched text config ran before (by ``id`` of the config:
#: configs define ``__eq__`` and are unhashable), for calls outside a sharded forward
_inner_of: dict[int, str] = {}


@dataclass(frozen=True)
class ShardPlan:
    """One forward's split of a packed row of ``total`` tokens over the ``size`` ranks of ``group``."""

    group: Any
    size: int
    rank: int
    total: int
    counters: torch.Tensor  # 1 × total: the whole row's per-sequence token counters
    keep: torch.Tensor  # M: the row positions whose hidden states the LM head needs

    @property
    def padded(self) -> int:
        return -(-self.total // self.size) * self.size

    @property
    def local(self) -> int:
        return self.padded // self.size

    @property
    def start(self) -> int:
        return self.rank * self.local


def valid_sizes(heads: int, world_size: int) -> list[int]:
    """The sequence-parallel sizes Ulysses can use: divisors of both the query heads and the world."""
    return [k for k in range(1, min(heads, world_size) + 1) if heads % k == 0 and world_size % k == 0]


def check_size(size: int, heads: int, world_size: int, family: str) -> None:
    """Refuse a size the model's heads cannot be split by, naming the sizes that would work."""
    if heads % size:
        raise ConfigError(
            f"actor.sequence_parallel_size={size}: Ulysses splits the {heads} attention heads of the "
            f"{family} language model over the sequence-parallel ranks, and {size} does not divide "
            f"{heads}. Sizes that work with {world_size} processes: {valid_sizes(heads, world_size)}"
        )


class _AllToAll(torch.autograd.Function):
    """``all_to_all_single`` over equal chunks of dim 0; its gradient is the same exchange back."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        x = x.contiguous()  # before empty_like, which would copy a view's strides: the exchange is flat
        out = torch.empty_like(x)
        tdist.all_to_all_single(out, x, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous()
        out = torch.empty_like(grad)
        tdist.all_to_all_single(out, grad, group=ctx.group)
        return out, None


class _SumOverGroup(torch.autograd.Function):
    """A sum over the group whose gradient is the sum of the ranks' gradients: each rank computes
    the same loss (scaled so that their sum is the group's), so each part gets the whole gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> torch.Tensor:
        ctx.group = group
        out = x.clone()
        tdist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        out = grad.contiguous().clone()
        tdist.all_reduce(out, group=ctx.group)
        return out, None


def _tokens_to_heads(x: torch.Tensor, plan: ShardPlan) -> torch.Tensor:
    """``1 × H × n × D`` (my tokens, all heads) to ``1 × H/k × total × D`` (all tokens, my heads)."""
    k, heads, n, dim = plan.size, x.shape[1], x.shape[2], x.shape[3]
    chunks = x.reshape(k, heads // k, n, dim)  # chunk j of the heads goes to rank j
    got = _AllToAll.apply(chunks, plan.group)  # got[i]: rank i's tokens of my heads
    full = got.permute(1, 0, 2, 3).reshape(1, heads // k, k * n, dim)
    return full[:, :, : plan.total]


def _heads_to_tokens(out: torch.Tensor, plan: ShardPlan) -> torch.Tensor:
    """The attention's ``1 × total × H/k × D`` (all tokens, my heads) to ``1 × n × H × D``."""
    k, part, dim = plan.size, out.shape[2], out.shape[3]
    out = torch.nn.functional.pad(out, (0, 0, 0, 0, 0, plan.padded - plan.total))
    chunks = out.reshape(k, plan.local, part, dim)  # chunk j of the tokens goes back to rank j
    got = _AllToAll.apply(chunks, plan.group)  # got[i]: my tokens of rank i's heads
    return got.permute(1, 0, 2, 3).reshape(1, plan.local, k * part, dim)


class _Regrouped:
    """The attention module as the inner attention sees it after the key/value heads were repeated
    to one per query head (so that ``k`` could split them): no further repetition."""

    num_key_value_groups = 1

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def ulysses_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """The registered :data:`ULYSSES` attention: all-to-all, the inner attention over the whole row,
    all-to-all back; without a plan (a forward outside :meth:`SequenceParallel.sharding`, such as
    generation) just the inner attention."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    plan: ShardPlan | None = kwargs.pop(PLAN_KWARG, None)
    inner = ALL_ATTENTION_FUNCTIONS[_inner_of[id(module.config)]]
    if plan is None:
        return inner(module, query, key, value, attention_mask, **kwargs)
    if key.shape[1] % plan.size:  # repeat the key/value heads to one per query head
        groups = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        module = _Regrouped(module)
    q, k, v = (_tokens_to_heads(t, plan) for t in (query, key, value))
    kwargs["position_ids"] = plan.counters
    out, _ = inner(module, q, k, v, None, **kwargs)
    return _heads_to_tokens(out, plan), None


def _ulysses_mask(**kwargs: Any) -> Any:
    """No mask on an unpadded row (the inner attention keeps its sequences apart); otherwise the
    inner implementation's."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    unpadded = kwargs.get("attention_mask") is None and kwargs.get("q_length") == kwargs.get("kv_length")
    if unpadded and kwargs.get("q_offset") == 0:
        return None
    return ALL_MASK_ATTENTION_FUNCTIONS[_inner_of[id(kwargs["config"])]](**kwargs)


def _pad_slice(x: torch.Tensor, dim: int, plan: ShardPlan) -> torch.Tensor:
    """This rank's part of ``x`` along ``dim`` (the row's tokens), after padding to ``plan.padded``."""
    pad = [0, 0] * (x.ndim - 1 - dim % x.ndim) + [0, plan.padded - plan.total]
    return torch.nn.functional.pad(x, pad).narrow(dim, plan.start, plan.local)


def _slice_deepstack(kwargs: dict[str, Any], plan: ShardPlan) -> None:
    """This rank's part of transformers' DeepStack arguments (Qwen3-VL), which the decoder stack adds
    to the hidden states at the visual positions after its first layers: ``visual_pos_masks``
    (``1 × total``) sliced as the tokens are, and of each ``deepstack_visual_embeds`` feature map (a
    row per visual token of the row, in order) the rows of the visual tokens in this rank's part."""
    masks, features = kwargs.get("visual_pos_masks"), kwargs.get("deepstack_visual_embeds")
    if masks is None or features is None:
        return
    local = _pad_slice(masks.to(torch.uint8), -1, plan).bool()
    before, inside = int(masks[..., : plan.start].sum()), int(local.sum())
    kwargs["visual_pos_masks"] = local
    kwargs["deepstack_visual_embeds"] = [f[before : before + inside] for f in features]


class SequenceParallel:
    """Ulysses installed on a model: the decoder stack's hooks and the group they run over.

    Outside :meth:`sharding` the model computes as before (the hooks and the attention pass through).
    ``vision``: the backend's tower sharding, bound to the model (None: the whole tower on each rank)."""

    def __init__(
        self,
        text_model: torch.nn.Module,
        group: Any,
        size: int,
        rank: int,
        vision: Callable[[TowerShard], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.group, self.size, self.rank = group, size, rank
        self.vision = vision
        self._plan: ShardPlan | None = None
        text_model.register_forward_pre_hook(self._enter, with_kwargs=True)
        text_model.register_forward_hook(self._leave, with_kwargs=True)

    @contextmanager
    def sharding(self, packed: PackedInputs | None, model_kwargs: dict[str, Any]) -> Iterator[None]:
        """Run the forwards inside on this rank's part of ``packed`` (every rank of the group runs
        the same ``packed``); the decoder stack returns the hidden states of the response positions
        only (``packed.logits_index``), so ``model_kwargs``' ``logits_to_keep`` becomes 0 (all)."""
        if packed is None:
            raise ConfigError(
                "actor.sequence_parallel_size > 1 shards padding-free packed rows, and this backend "
                "could not pack the micro-batch (see the warning above)"
            )
        if "logits_to_keep" in model_kwargs:
            model_kwargs["logits_to_keep"] = 0
        positions = packed.position_ids
        counters = positions[0] if positions.ndim == 3 else positions
        self._plan = ShardPlan(
            self.group, self.size, self.rank, int(counters.shape[-1]), counters, packed.logits_index
        )
        tower = self.vision(TowerShard(self.group, self.size, self.rank)) if self.vision else nullcontext()
        try:
            with tower:
                yield
        finally:
            self._plan = None

    def _enter(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        plan = self._plan
        if plan is None:
            return None
        embeds, positions = kwargs.get("inputs_embeds"), kwargs.get("position_ids")
        if args or embeds is None or positions is None or embeds.shape[1] != plan.total:
            raise RuntimeError(
                "sequence parallelism: the decoder stack must be called with keyword inputs_embeds and "
                f"position_ids of the packed row ({plan.total} tokens); the backend's "
                "sequence_parallel_text_model names the wrong module"
            )
        kwargs["inputs_embeds"] = _pad_slice(embeds, 1, plan)
        kwargs["position_ids"] = _pad_slice(positions, -1, plan)
        _slice_deepstack(kwargs, plan)
        kwargs[PLAN_KWARG] = plan
        return args, kwargs

    def _leave(self, module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
        plan = self._plan
        if plan is None:
            return None
        hidden = output.last_hidden_state  # 1 × local × hidden
        keep = plan.keep.to(hidden.device)
        mine = (keep >= plan.start) & (keep < plan.start + plan.local)
        rows = hidden.new_zeros(1, keep.numel(), hidden.shape[-1])
        rows = rows.index_copy(1, torch.nonzero(mine).flatten(), hidden[:, keep[mine] - plan.start])
        output.last_hidden_state = _SumOverGroup.apply(rows, plan.group)
        return output


def sequence_parallel_of(model: Any) -> SequenceParallel | None:
    """The Ulysses installed on ``model`` (:func:`install_sequence_parallel`), if any."""
    found: SequenceParallel | None = getattr(model, _MODEL_ATTR, None)
    return found


def install_sequence_parallel(model: Any, backend: Any, group: Any, size: int, rank: int) -> SequenceParallel:
    """Install Ulysses over ``group`` (``size`` ranks, this one ``rank``) on ``model``: hooks on the
    backend's decoder stack, and its attention switched to :data:`ULYSSES` around the one it ran.

    Raises :class:`~videorl.errors.ConfigError` when the family declines, its attention cannot keep
    packed sequences apart, or ``size`` does not divide its heads."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    family = str(getattr(backend, "family", type(backend).__name__))
    reason = getattr(backend, "sequence_parallel_unsupported", None)
    locate = getattr(backend, "sequence_parallel_text_model", None)
    if reason or locate is None:
        raise ConfigError(
            f"actor.sequence_parallel_size={size}: the {family} backend cannot shard sequences "
            f"({reason or 'it has no sequence_parallel_text_model()'}); set it to 1"
        )
    text_model = locate(model)
    config = text_model.config
    world = tdist.get_world_size() if tdist.is_initialized() else size
    check_size(size, int(config.num_attention_heads), world, family)
    current = config._attn_implementation
    if current not in (*INNER, ULYSSES):
        raise ConfigError(
            f"actor.sequence_parallel_size={size}: the {family} language model runs {current!r} "
            f"attention; Ulysses needs one that keeps packed sequences apart: {', '.join(INNER)}"
        )
    ALL_ATTENTION_FUNCTIONS.register(ULYSSES, ulysses_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ULYSSES, _ulysses_mask)
    for module in text_model.modules():
        sub = getattr(module, "config", None)
        if sub is not None and getattr(sub, "_attn_implementation", None) in INNER:
            _inner_of[id(sub)] = sub._attn_implementation
            sub._attn_implementation = ULYSSES
    shard_vision = backend.sequence_parallel_vision if shards_vision_tower(backend) else None
    vision = (lambda shard: shard_vision(model, shard)) if shard_vision is not None else None
    installed = SequenceParallel(text_model, group, size, rank, vision)
    setattr(model, _MODEL_ATTR, installed)
    return installed
