"""A split's labels: list its images, check each image and label file (check.py), cache the result (cache.py);
label files of the labelling tools' formats, a COCO json among them, are read by data/annotations; convert.py writes
a split's checked labels back out."""
