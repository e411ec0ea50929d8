"""Labels as the labelling tools export them (COCO json, Pascal VOC xml, Label Studio json, CVAT for images xml),
read in place for a split written `{annotations: A, images: I}` (formats.py); written back out by data/labels/convert.py."""
