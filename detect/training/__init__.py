"""Training: the run's settings, its set-up (setup/), the run it sets up (run.py) with its results log
(results_log.py) and phase times (phase_times.py), the training step written once (step.py), the epoch loop
(epoch.py) and how it talks with the hooks (control.py), the Trainer, checkpoints and resume, distributed
(torchrun).

The loss lives here (loss.py): it is the maths only training needs, and a reader looks for it beside the loop that
calls it, not in models/ (the networks return raw head outputs and know no targets). May import floors 1-5:
inference for the final evaluation of best.pt, evaluation for the per-epoch validation."""
