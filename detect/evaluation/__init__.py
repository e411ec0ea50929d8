"""Evaluation: COCO mAP by pycocotools (evaluator.py), the validation loop over a loader (val_loop.py), the confusion
matrix, metric plots (metric_plots.py), text reports, val's optional outputs (val_outputs.py) and the image-size study
(size_study.py). May import floors 1-4 (inference: the annotated grid of predictions and YOLO txt rows)."""
