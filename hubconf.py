"""torch.hub entry points, as ultralytics/yolov5's hubconf.py names them (detect/hub/ does the work):

    model = torch.hub.load("path/to/detect", "custom", path="best.pt", source="local")
    model = torch.hub.load("path/to/detect", "yolov5s", source="local")  # yolov5s.pt from ./, ./weights/ or weights/

Nothing is downloaded. `python hubconf.py --model yolov5n` predicts on the bundled sample images.
"""

import sys as _sys
from pathlib import Path as _Path

from detect import hub as _hub

dependencies = ["torch", "torchvision", "cv2", "numpy", "yaml", "PIL"]  # torch.hub checks they import

_HERE = _Path(__file__).resolve().parent  # this repository: its weights/ folder is searched too

custom = _hub.custom_entry(_HERE)
yolov5n = _hub.named_entry("yolov5n", _HERE)
yolov5s = _hub.named_entry("yolov5s", _HERE)
yolov5m = _hub.named_entry("yolov5m", _HERE)
yolov5l = _hub.named_entry("yolov5l", _HERE)
yolov5x = _hub.named_entry("yolov5x", _HERE)
yolov5n6 = _hub.named_entry("yolov5n6", _HERE)
yolov5s6 = _hub.named_entry("yolov5s6", _HERE)
yolov5m6 = _hub.named_entry("yolov5m6", _HERE)
yolov5l6 = _hub.named_entry("yolov5l6", _HERE)
yolov5x6 = _hub.named_entry("yolov5x6", _HERE)

if __name__ == "__main__":
    _sys.exit(_hub.main(hub_dir=_HERE))
