"""Training and evaluation engine: evaluator, metrics, checkpoints."""
