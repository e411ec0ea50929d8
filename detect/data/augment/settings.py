"""The training augmentation settings: the part of the hyp yaml the train dataset uses (yolov5's names)."""

from __future__ import annotations

import dataclasses

from detect.config import Hyp
from detect.data.augment.transforms import Warp


@dataclasses.dataclass(frozen=True)
class AugmentSettings:
    """Gains and probabilities of the CPU augmentations; meanings as in yolov5's hyp yamls
    (docs/yolov5.md, "Hyper-parameters")."""

    hsv_h: float
    hsv_s: float
    hsv_v: float
    degrees: float
    translate: float
    scale: float
    shear: float
    perspective: float
    flipud: float
    fliplr: float
    mosaic: float
    mixup: float
    albumentations_p: float

    @property
    def warp(self) -> Warp:
        """The random warp's ranges."""
        return Warp(self.degrees, self.translate, self.scale, self.shear, self.perspective)

    @classmethod
    def from_hyp(cls, hyp: Hyp) -> AugmentSettings:
        """The hyp's fields of the same names."""
        return cls(**{field.name: getattr(hyp, field.name) for field in dataclasses.fields(cls)})
