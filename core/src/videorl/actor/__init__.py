"""The policy being trained: its forward, update, reference log-probs and weights (FSDP, LoRA)."""
