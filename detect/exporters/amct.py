"""INT8 .om: Huawei's AMCT (amct_onnx) calibrates the ONNX and writes the deploy ONNX that atc then converts.

AMCT's post-training quantization API, as CANN documents it (hiascend.com, CANN 8.0 "AMCT" API reference:
create_quant_config atlasamct_16_0152/0153, quantize_model 0154, save_model 0155; used the same way by
Ascend/samples python/level1_single_api/9_amct/amct_onnx/resnet-101/src/resnet-101_calibration.py):
  create_quant_config(config_file, model_file, skip_layers=None, batch_num=1, activation_offset=True, ...)
  quantize_model(config_file, model_file, modified_onnx_file, record_file)
  batch_num batches through onnxruntime.InferenceSession(modified_onnx_file, amct_onnx.AMCT_SO)
  save_model(modified_onnx_file, record_file, save_path) -> <save_path>_fake_quant_model.onnx and
  <save_path>_deploy_model.onnx (save_model's first parameter is spelt modfied_onnx_file in some releases, so it
  is passed by position).
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from detect.atomic_file import replacing
from detect.errors import UserError
from detect.exporters.int8 import calibration_set, carry_int8_metadata, float_nodes
from detect.exporters.onnx_export import INPUT_NAME, import_onnx
from detect.exporters.torchscript import ExportSettings

LOGGER = logging.getLogger(__name__)


def _amct():
    """amct_onnx, or one line naming what to install."""
    try:
        import amct_onnx
    except ImportError as error:
        raise UserError("--include om --int8 needs Huawei's AMCT for ONNX (amct_onnx): pip install the amct_onnx "
                        "wheel that CANN's toolkit ships (Ascend-cann-amct package, amct_onnx/ folder), or export "
                        f"the .om without --int8 ({error})") from None
    return amct_onnx


def calibrate_amct(onnx_path: Path, data: str, calib_images: int, settings: ExportSettings) -> Path:
    """Calibrate `onnx_path` with AMCT on `calib_images` train images of `data`, skipping the convolutions that the
    ONNX Runtime int8 keeps in float (int8.float_nodes); returns AMCT's deploy model for atc, with the ONNX's
    metadata, as <stem>-int8-amct.onnx beside it."""
    amct = _amct()
    import onnxruntime

    batches = calibration_set(data, calib_images, settings)
    onnx = import_onnx()
    model = onnx.load(str(onnx_path))
    skipped, _ = float_nodes(model)
    with tempfile.TemporaryDirectory(prefix="amct.") as folder:
        config_file, record_file = str(Path(folder, "config.json")), str(Path(folder, "record.txt"))
        modified = str(Path(folder, "modified_model.onnx"))
        amct.create_quant_config(config_file=config_file, model_file=str(onnx_path), skip_layers=skipped,
                                 batch_num=len(batches), activation_offset=True)
        amct.quantize_model(config_file=config_file, model_file=str(onnx_path), modified_onnx_file=modified,
                            record_file=record_file)
        LOGGER.info("AMCT: calibrating on %d batches of %s", len(batches), data)
        session = onnxruntime.InferenceSession(modified, amct.AMCT_SO)
        for batch in batches:
            session.run(None, {INPUT_NAME: batch})
        amct.save_model(modified, record_file, str(Path(folder, "model")))
        written = Path(folder, "model_deploy_model.onnx")
        if not written.is_file():
            raise UserError(f"AMCT's save_model wrote no deploy model ({written.name}) for {onnx_path}")
        deploy = onnx.load(str(written))
    # atc and the .om's metadata file (om.py) read the ONNX's metadata: the deploy model carries the fp32 one's.
    carry_int8_metadata(model, deploy)
    path = onnx_path.with_name(f"{onnx_path.stem}-int8-amct.onnx")
    with replacing(path) as temporary:
        onnx.save(deploy, str(temporary))
    return path
