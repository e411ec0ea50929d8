"""Optional albumentations stage: blur, median blur, gray and CLAHE, each with probability hyp.albumentations_p."""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np


def build_albumentations(probability: float) -> Callable[[np.ndarray, int], np.ndarray] | None:
    """A function (image, seed) -> image, or None when the probability is 0 (the stage is off).

    The seed comes from the sample's own generator, so the stage is as reproducible as the rest of the pipeline.
    """
    if probability <= 0:
        return None
    # albumentations asks PyPI for its latest version when imported, unless told not to: training never uses the
    # network (an offline host waits on the DNS and prints a warning)
    os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
    import albumentations  # imported only when the stage is on: it is slow to import

    compose = albumentations.Compose([
        albumentations.Blur(p=probability),
        albumentations.MedianBlur(p=probability),
        albumentations.ToGray(p=probability),
        albumentations.CLAHE(p=probability),
    ])
    def apply(image: np.ndarray, seed: int) -> np.ndarray:
        compose.set_random_seed(seed)
        return compose(image=image)["image"]

    return apply
