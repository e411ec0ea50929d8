"""Labels as the labelling tools export them (COCO json, Pascal VOC xml, Label Studio json, CVAT for images xml),
read in place for a split written `{annotations: A, images: I}` (formats.py), and written back out (convert.py)."""
