"""Ascend offline model (.om): CANN's ATC converts the static ONNX export for one chip (--soc_version); the ONNX's
metadata goes beside it as <stem>.om.json (an .om holds none), which val and predict read."""

from __future__ import annotations

import json
import logging
import shlex
import shutil
import subprocess
from pathlib import Path

from detect.atomic_file import replacing, write_text
from detect.errors import UserError
from detect.exporters.onnx_export import INPUT_NAME, import_onnx
from detect.exporters.torchscript import ExportSettings

LOGGER = logging.getLogger(__name__)
METADATA_SUFFIX = ".om.json"  # <stem>.om.json beside <stem>.om; inference/runtimes/om_model.py reads it


def atc_command(onnx_path: Path, soc_version: str, settings: ExportSettings, output: Path | None = None) -> list[str]:
    """The ATC command line for `onnx_path`: ONNX in (--framework=5), <stem>.om out beside it (or `output`.om), a
    static NCHW input."""
    height, width = settings.imgsz
    output = onnx_path.with_suffix("") if output is None else output
    return ["atc", f"--model={onnx_path}", "--framework=5", f"--output={output}",
            f"--soc_version={soc_version}", f"--input_shape={INPUT_NAME}:{settings.batch_size},3,{height},{width}",
            "--input_format=NCHW", "--log=error"]


def write_om_metadata(onnx_path: Path, soc_version: str) -> Path:
    """<stem>.om.json: the ONNX's metadata (names, stride, shape, "nms" when in the graph) and the chip."""
    onnx = import_onnx()
    metadata = {prop.key: json.loads(prop.value) for prop in onnx.load(str(onnx_path)).metadata_props}
    return write_text(onnx_path.with_suffix(METADATA_SUFFIX), json.dumps({**metadata, "soc_version": soc_version},
                                                                         indent=1))


def convert_om(onnx_path: Path, soc_version: str, settings: ExportSettings) -> Path | None:
    """Run ATC on `onnx_path` and write the .om's metadata; the .om path, or None when `atc` is not on PATH (the
    command is logged to run later, and the metadata is already where the .om will be)."""
    if settings.dynamic:
        raise UserError("om needs static shapes (ATC compiles one input shape): export it without --dynamic")
    write_om_metadata(onnx_path, soc_version)
    command = atc_command(onnx_path, soc_version, settings)
    atc = shutil.which("atc")
    if atc is None:
        LOGGER.warning("atc (CANN's model converter) is not on PATH, so no .om was made; %s is written. On a machine "
                       "with CANN (source its set_env.sh), run:\n  %s", onnx_path, shlex.join(command))
        return None
    LOGGER.info("running %s", shlex.join(command))
    om_path = onnx_path.with_suffix(".om")
    with replacing(om_path, keep_suffix=True) as temporary:  # atc writes <output>.om: the temporary
        written = atc_command(onnx_path, soc_version, settings, temporary.with_suffix(""))
        result = subprocess.run([atc, *written[1:]], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            output = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()
            raise UserError(f"atc failed with exit code {result.returncode}: {output[-1]} (command: "
                            f"{shlex.join(command)})")
        if not temporary.is_file():
            raise UserError(f"atc finished but wrote no {om_path} (command: {shlex.join(command)})")
    return om_path
