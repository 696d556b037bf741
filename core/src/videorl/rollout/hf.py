"""The transformers ``generate`` rollout engine: simple, exact, and the reference for the others."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from videorl.model_inputs import token_logprobs
from videorl.rollout.types import Completion, SamplingParams

if TYPE_CHECKING:
    import torch

    from videorl.backend import ModelBackend
    from videorl.model_inputs import EncodedPrompt


class HFEngine:
    """Generates with ``model.generate`` on left-padded batches built by the backend.

    ``model`` is the policy itself when training in one process (``update_weights`` is then a no-op
    because the engine already sees the updated parameters) or a separate copy (``owns_model=True``)
    refreshed from the actor's state dict. Forbidden ids (visual placeholders, padded vocabulary) are
    suppressed in sampling and masked in the returned log-probs, exactly as in the training logits.
    """

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

    def _generate_chunk(self, prompts: Sequence[EncodedPrompt], params: SamplingParams) -> list[list[Completion]]:
        import torch

        repeated = [p for p in prompts for _ in range(params.n)]
        inputs = self.backend.collate(repeated)
        device = next(self.model.parameters()).device
        inputs = inputs.to(device=device, dtype=next(self.model.parameters()).dtype)
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
        with torch.no_grad():
            result = self.model.generate(
                **inputs.model_kwargs(),
                max_new_tokens=params.max_tokens,
                suppress_tokens=self.forbidden or None,
                pad_token_id=self.pad_id,
                eos_token_id=sorted(self.eos_ids),
                output_logits=True,
                return_dict_in_generate=True,
                **sampling,
            )
        new_tokens = result.sequences[:, inputs.prompt_width :]
        logits = torch.stack(result.logits, dim=1)  # B×T×V raw logits, before any processor
        logprobs = token_logprobs(logits, new_tokens, forbidden=self.forbidden)
        completions = [self._completion(new_tokens[i], logprobs[i]) for i in range(len(repeated))]
        return [completions[i * params.n : (i + 1) * params.n] for i in range(len(prompts))]

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
