"""Training augmentation on the CPU: its settings (the hyp's augmentation keys), warp, HSV, flips and mixup
(transforms.py), mosaic and the optional albumentations stage."""
