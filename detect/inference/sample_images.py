"""The sample images that ship with the package: what predict and hubconf.py run on when given no source."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from detect.data.records import IMAGE_SUFFIXES

# Package data (pyproject.toml), so a wheel install has them too; samples/README.md gives source and licence.
SAMPLES_DIR = Path(str(resources.files("detect") / "inference" / "samples"))


def sample_images() -> list[Path]:
    """The bundled sample images, sorted by name."""
    return sorted(path for path in SAMPLES_DIR.iterdir() if path.suffix.lower() in IMAGE_SUFFIXES)
