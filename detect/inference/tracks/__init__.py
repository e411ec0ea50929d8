"""Multi-object tracking on the Detector's detections (not experiment tracking: that is detect/tracking.py): a
tracker of the `trackers` library per stream (library.py, streams.py), its settings (settings.py), the frames of a
source tracked (loop.py) into MOT files and videos (outputs.py, drawing.py)."""
