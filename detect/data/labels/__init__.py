"""A split's labels: list its images, check each image and label file (check.py), cache the result (cache.py),
or read the boxes from a COCO json (coco_json.py)."""
