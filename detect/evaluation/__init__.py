"""Evaluation: COCO mAP by pycocotools (evaluator.py), the validation loop over a loader (loop.py), the confusion
matrix, metric plots, text reports and val's optional outputs. May import floors 1-4 (inference: the annotated
grid of predictions and YOLO txt rows)."""
