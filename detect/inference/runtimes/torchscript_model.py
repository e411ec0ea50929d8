"""A TorchScript export (`detect.export --include torchscript`) run by torch.jit on the backend's device."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import torch

from detect.backend import Backend
from detect.errors import UserError
from detect.inference.exported import ExportedModel, ExportInfo, existing_file

METADATA_FILE = "detect.json"  # the archive's extra file that exporters/torchscript.py writes


class TorchScriptInference(ExportedModel):
    """A traced export: the archive holds tensors and TorchScript code, which torch.jit's interpreter runs, and no
    pickled Python objects. Names, stride and input shape come from its extra file detect.json."""

    format = "torchscript"  # its name in inference/model.py's FORMATS

    def __init__(self, path: str | Path, backend: Backend) -> None:
        self.path, self.device = existing_file(path, "TorchScript"), backend.device
        extra = {METADATA_FILE: ""}
        try:
            with warnings.catch_warnings():
                # torch 2.14 marks torch.jit deprecated; the file is TorchScript, so torch.jit is what reads it.
                warnings.simplefilter("ignore", FutureWarning)
                self.module = torch.jit.load(str(self.path), map_location=backend.device, _extra_files=extra).eval()
        except RuntimeError as error:
            raise UserError(f"{self.path}: torch.jit cannot load it ({str(error).strip().splitlines()[0]})") from None
        if not extra[METADATA_FILE]:
            raise UserError(f"{self.path}: no {METADATA_FILE} inside (export it with python -m detect.export)")
        metadata = json.loads(extra[METADATA_FILE])
        dynamic, (height, width) = metadata.get("dynamic", True), metadata.get("imgsz", (None, None))
        shape = [None, 3, None, None] if dynamic else [metadata.get("batch"), 3, height, width]
        self._describe(ExportInfo.from_values(metadata, self.path), shape,
                       np.float16 if metadata.get("half") else np.float32)

    @torch.no_grad()
    def _run(self, array: np.ndarray) -> np.ndarray:
        return self.module(torch.from_numpy(array).to(self.device)).float().cpu().numpy()
