"""The transformers ``generate`` rollout engine: simple, exact, and the reference for the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from videorl.generation import (
    Completion,
    EngineCapabilities,
    EngineSpec,
    SamplingParams,
    check_engine_options,
)
from videorl.model_inputs import token_logprobs

if TYPE_CHECKING:
    import torch

    from videorl.backend import ModelBackend
    from videorl.model_inputs import EncodedPrompt, ModelInputs


class ChosenLogprobs:
    """A forward hook on the generating model that keeps the log-prob of each sampled token only.

    ``generate(output_logits=True)`` would keep every step's raw logits, ``B×T×V`` (at 4,096 tokens,
    152k vocabulary and 64 sequences: 640 GB in float32). Each forward's next-token logits are held
    until the next forward, whose input is the token sampled from them; the last step's token comes
    from the returned sequences. The log-probs are of the raw logits with the forbidden ids masked,
    as the training forward computes them (:func:`~videorl.model_inputs.token_logprobs`)."""

    def __init__(self, forbidden: Sequence[int]) -> None:
        self.forbidden = forbidden
        self.pending: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def _take(self, tokens: torch.Tensor) -> None:
        if self.pending is not None:
            self.steps.append(token_logprobs(self.pending, tokens, forbidden=self.forbidden))
            self.pending = None

    def __call__(self, module: Any, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        input_ids = kwargs.get("input_ids")
        if input_ids is not None and self.pending is not None:
            self._take(input_ids[:, -1])
        self.pending = output.logits[:, -1].detach()

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """``B×T`` log-probs of ``new_tokens`` (the generated part of the sequences)."""
        import torch

        self._take(new_tokens[:, -1])
        if len(self.steps) != new_tokens.shape[1]:
            raise RuntimeError(
                f"hf engine: {len(self.steps)} forward passes for {new_tokens.shape[1]} new tokens"
            )
        return torch.stack(self.steps, dim=1)


def generation_positions(model: Any, inputs: ModelInputs) -> torch.Tensor:
    """The position ids of the left-padded prompts ``inputs`` that ``generate`` continues: each row's
    tokens counted from its first real one (padding 0), ``B×L``. For a model with 3-D rotary positions
    (M-RoPE: its language model's public ``get_rope_index``, which the Qwen backends' ``prepare_model``
    set to the rule the training forward and vLLM use) those counters, then the ``3×B×L`` rotary
    positions (the counters on every axis for a prompt without visual items): ``4×B×L``, transformers'
    layout for these models, whose first row is what their attention masks are built from."""
    import torch

    kwargs = inputs.model_kwargs()
    ids, mask = kwargs.pop("input_ids"), kwargs.pop("attention_mask")
    text = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    rope = getattr(getattr(model, "model", model), "get_rope_index", None)
    if rope is None:
        return text
    visual = kwargs.get("mm_token_type_ids") is not None and (
        kwargs.get("image_grid_thw") is not None or kwargs.get("video_grid_thw") is not None
    )
    rotary = rope(ids, attention_mask=mask, **kwargs)[0] if visual else text.expand(3, -1, -1)
    return torch.cat([text[None], rotary.to(text.device)], dim=0)


class HFEngine:
    """Generates with ``model.generate`` on left-padded batches built by the backend: each prompt is
    prefilled once and its KV cache repeated for its ``n`` responses (:meth:`_prefill`).

    ``model`` is the policy itself when training in one process (``update_weights`` is then a no-op
    because the engine already sees the updated parameters) or a separate copy (``owns_model=True``)
    refreshed from the actor's state dict. Forbidden ids (visual placeholders, padded vocabulary) are
    suppressed in sampling and masked in the returned log-probs, exactly as in the training logits.
    """

    capabilities = EngineCapabilities(
        weights_layout="transformers",
        weights_in_engine_dtype=False,
        shares_actor_module=True,
        own_devices=False,
        request_format="encoded",
    )
    #: ``rollout.engine_options`` it takes: the dtype and device of its own copy (the spec's by default)
    accepted_options = ("max_batch_prompts", "dtype", "device")

    def __init__(
        self,
        backend: ModelBackend,
        model: Any = None,
        *,
        owns_model: bool = False,
        max_batch_prompts: int = 64,
        dtype: Any = None,
        device: Any = None,
    ) -> None:
        self.backend = backend
        self.model = model if model is not None else backend.load_model(dtype=dtype, device=device)
        self.owns_model = owns_model or model is None
        self.max_batch_prompts = max_batch_prompts
        self.forbidden = sorted(backend.forbidden_token_ids())
        tokenizer = backend.processor.tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        eos = self.model.generation_config.eos_token_id
        if eos is None:
            eos = tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos])

    @classmethod
    def from_spec(cls, backend: ModelBackend, spec: EngineSpec, options: Mapping[str, Any]) -> HFEngine:
        """The engine generating with ``spec.actor_module``, or with a copy of its own loaded in
        ``spec.dtype`` on ``spec.device`` (fast attention on), each unless ``options`` say otherwise."""
        check_engine_options(spec.name, options, cls.accepted_options)
        model, owns = spec.actor_module, spec.actor_module is None
        if owns:
            import torch

            from videorl.devices import use_fast_attention

            dtype = getattr(torch, str(options.get("dtype", spec.dtype)))
            model = backend.load_model(dtype=dtype, device=options.get("device", spec.device))
            use_fast_attention(model, dtype)
        batch = options.get("max_batch_prompts", spec.max_batch_prompts or 64)
        return cls(backend, model, owns_model=owns, max_batch_prompts=int(batch))

    def generate(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        import torch

        out: list[list[Completion]] = []
        was_training = self.model.training
        self.model.eval()
        if params.seed is not None:
            torch.manual_seed(params.seed)
        try:
            for start in range(0, len(prompts), self.max_batch_prompts):
                chunk = prompts[start : start + self.max_batch_prompts]
                out.extend(self._generate_chunk(chunk, params))
        finally:
            self.model.train(was_training)
        return out

    def _generate_chunk(
        self, prompts: Sequence[EncodedPrompt], params: SamplingParams
    ) -> list[list[Completion]]:
        import torch

        param = next(self.model.parameters())
        inputs = self.backend.collate(prompts).to(device=param.device, dtype=param.dtype)
        ids, mask, cache, positions = self._prefill(inputs, params.n)
        sampling: dict[str, Any] = (
            {"do_sample": False}
            if params.greedy
            else {
                "do_sample": True,
                "temperature": params.temperature,
                "top_p": params.top_p,
                "top_k": params.top_k or None,
            }
        )
        chosen = ChosenLogprobs(self.forbidden)
        handle = self.model.register_forward_hook(chosen, with_kwargs=True)
        try:
            with torch.no_grad():
                # The prompts' last token is the only one not in the cache: generate's first forward
                # computes the first token's logits from it, then decodes as usual.
                result = self.model.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=cache,
                    max_new_tokens=params.max_tokens,
                    suppress_tokens=self.forbidden or None,
                    pad_token_id=self.pad_id,
                    eos_token_id=sorted(self.eos_ids),
                    return_dict_in_generate=True,
                    **sampling,
                )
        finally:
            handle.remove()
        new_tokens = result.sequences[:, inputs.prompt_width :]
        logprobs = chosen.finish(new_tokens)
        completions = [self._completion(new_tokens[i], logprobs[i]) for i in range(new_tokens.shape[0])]
        return [completions[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

    def _prefill(self, inputs: ModelInputs, n: int) -> tuple[torch.Tensor, torch.Tensor, Any, torch.Tensor]:
        """One forward over each prompt but its last token, its KV cache then repeated for the ``n`` rows.

        Returns the ``n``-fold input ids, attention mask and position ids (rows ``p·n … p·n + n − 1``
        continue prompt ``p``) and the cache. The positions are :func:`generation_positions`, passed
        explicitly so that decoding continues them (``generate`` adds one per token) and never reads
        positions the model kept from another batch (Qwen-VL's ``rope_deltas``).

        Memory, for ``B`` prompts of ``W`` tokens (``P`` visual patches each) and ``T`` new tokens:
        the batch holds ``B·P`` patches, not ``B·n·P``, and the vision tower and the prefill run on
        ``B`` rows, not ``B·n``, so their transient activations shrink ``n``-fold (at 7B the MLP's
        alone are ≈ 1.5 GB per 20k-token row in bf16); the KV cache still holds ``B·n·(W + T)``
        positions, since a transformers cache cannot share a prefix between rows (vLLM's prefix
        cache does); the logits are one step's ``B·n×V`` at a time (:class:`ChosenLogprobs`),
        never ``B·n×T×V``.
        """
        import torch

        kwargs = inputs.model_kwargs()
        ids, mask = kwargs.pop("input_ids"), kwargs.pop("attention_mask")
        positions = generation_positions(self.model, inputs)
        if "mm_token_type_ids" in kwargs:
            kwargs["mm_token_type_ids"] = kwargs["mm_token_type_ids"][:, :-1]
        with torch.no_grad():
            out = self.model(
                input_ids=ids[:, :-1],
                attention_mask=mask[:, :-1],
                position_ids=positions[..., :-1],
                use_cache=True,
                logits_to_keep=1,
                **kwargs,
            )
        cache = out.past_key_values
        if n > 1:
            # beam search's reordering: the one batch operation every cache layer has (linear-attention
            # states of Qwen3.5 included, which lack ``batch_repeat_interleave``)
            rows = torch.arange(ids.shape[0], device=ids.device).repeat_interleave(n)
            cache.reorder_cache(rows)
        batch_dim = 1 if positions.ndim == 3 else 0
        return (
            ids.repeat_interleave(n, dim=0),
            mask.repeat_interleave(n, dim=0),
            cache,
            positions.repeat_interleave(n, dim=batch_dim),
        )

    def _completion(self, tokens: torch.Tensor, logprobs: torch.Tensor) -> Completion:
        ids = [int(t) for t in tokens.tolist()]
        for end, token in enumerate(ids):
            if token in self.eos_ids:
                return Completion(ids[: end + 1], [float(x) for x in logprobs[: end + 1].tolist()], "stop")
        return Completion(ids, [float(x) for x in logprobs.tolist()], "length")

    def update_weights(self, state_dict: Mapping[str, Any]) -> None:
        if self.owns_model:
            self.model.load_state_dict(dict(state_dict), strict=True)

    def close(self) -> None:
        self.model = None
