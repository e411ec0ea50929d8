"""torch.hub entry points (hubconf.py): yolov5's hub models on the Detector, with results shaped as yolov5's.

    model = torch.hub.load("path/to/detect", "custom", path="best.pt", source="local")
    results = model(["photo.jpg", Image.open("other.jpg")], size=640)
    results.print(); results.xyxy[0]; results.save(); results.crop(); results.render()

entries.py loads (weights, exports, the named models), model.py is yolov5's AutoShape, results.py its Detections,
images.py the inputs it takes.
"""

from detect.hub.entries import MODEL_NAMES, custom_entry, device_spec, find_weights, load, main, named_entry
from detect.hub.images import sample_inputs
from detect.hub.model import HubModel
from detect.hub.results import HubResults

__all__ = ["MODEL_NAMES", "HubModel", "HubResults", "custom_entry", "device_spec", "find_weights", "load", "main",
           "named_entry", "sample_inputs"]
