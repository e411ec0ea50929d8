# Sourced by the yolov5 side-by-side scripts, with $work (a scratch folder) and $yolov5_python set: yolov5 runs
# without a network. The ultralytics package it imports stays offline, and yolov5 finds the Arial.ttf it would
# otherwise download before training or validating (matplotlib's DejaVu Sans, in a config folder of the run's own).
export YOLO_OFFLINE=1
export YOLOV5_CONFIG_DIR="$work/yolov5_config"
mkdir -p "$YOLOV5_CONFIG_DIR"
"$yolov5_python" -c "import matplotlib, pathlib, shutil, sys
shutil.copy(pathlib.Path(matplotlib.get_data_path()) / 'fonts/ttf/DejaVuSans.ttf', sys.argv[1])" \
  "$YOLOV5_CONFIG_DIR/Arial.ttf"
