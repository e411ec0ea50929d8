"""Tiled training: windows of large images as records of their own (windows.py), their pixels cropped from the
decoded or cached image as they are read (images.py)."""
