"""Training runs: checkpoints, metrics and run records (the loop itself composes these)."""
