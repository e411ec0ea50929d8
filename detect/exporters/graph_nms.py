"""NMS inside the exported graph (`--nms`): ONNX's standard NonMaxSuppression after the decode, fixed-size outputs.

The graph's (B, N, 5+nc) predictions become `detections` (B, max_det, 6) [x1, y1, x2, y2, score, class], best
first, rows past an image's count filled with -1, and `count` (B,) int64: fixed shapes, which ATC and every
runtime take. The rules are validation's (ops/nms.py): score = obj * cls above conf, one NMS per class (a box may
keep several classes) or one for all (`agnostic`: each box's best class), IoU above iou suppresses, the best
max_det of the image kept. Unlike ops/nms.py there is no cap of 30,000 candidates before NMS.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from detect.errors import UserError

NMS_OUTPUTS = ("detections", "count")
PADDING = -1.0  # the value of every entry of a row past an image's count


@dataclasses.dataclass(frozen=True)
class NmsSettings:
    """The thresholds the graph's NMS is fixed with (stored in the export's metadata as "nms")."""

    conf_threshold: float = 0.25
    iou_threshold: float = 0.45
    max_det: int = 300
    agnostic: bool = False


class _Graph:
    """Appends nodes and constants to an ONNX graph under unique names; axes follow the opset (inputs since 13)."""

    def __init__(self, onnx, graph, opset: int) -> None:
        self.onnx, self.graph, self.opset, self.count = onnx, graph, opset, 0

    def name(self, hint: str) -> str:
        self.count += 1
        return f"nms/{hint}_{self.count}"

    def constant(self, hint: str, value) -> str:
        name = self.name(hint)
        self.graph.initializer.append(self.onnx.numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], hint: str, outputs: int = 1, **attributes) -> list[str]:
        names = [self.name(hint) for _ in range(outputs)]
        self.graph.node.append(self.onnx.helper.make_node(op, inputs, names, name=self.name(op), **attributes))
        return names

    def one(self, op: str, inputs: list[str], hint: str, **attributes) -> str:
        return self.node(op, inputs, hint, **attributes)[0]

    def unsqueeze(self, tensor: str, axis: int) -> str:
        if self.opset >= 13:
            return self.one("Unsqueeze", [tensor, self.constant("axes", np.array([axis], np.int64))], "unsqueezed")
        return self.one("Unsqueeze", [tensor], "unsqueezed", axes=[axis])

    def sum_over(self, tensor: str, axis: int) -> str:
        if self.opset >= 13:
            axes = self.constant("axes", np.array([axis], np.int64))
            return self.one("ReduceSum", [tensor, axes], "sum", keepdims=0)
        return self.one("ReduceSum", [tensor], "sum", axes=[axis], keepdims=0)

    def slice_last(self, tensor: str, start: int, end: int) -> str:
        """tensor[..., start:end] of a rank-3 tensor."""
        return self.one("Slice", [tensor, self.constant("start", np.array([start], np.int64)),
                                  self.constant("end", np.array([end], np.int64)),
                                  self.constant("axis", np.array([2], np.int64))], "slice")

    def dimension(self, tensor: str, axis: int) -> str:
        """The size of `tensor` along `axis`, as a scalar int64."""
        shape = self.one("Shape", [tensor], "shape")
        return self.one("Gather", [shape, self.constant("index", np.array(axis, np.int64))], "dimension", axis=0)


def _boxes_and_scores(graph: _Graph, predictions: str, agnostic: bool) -> tuple[str, str, str | None]:
    """xyxy boxes (B, N, 4), NMS scores (B, C, N) with C = nc (or 1 when agnostic) and, when agnostic, each box's
    best class (B, N, 1) int64."""
    predictions = graph.one("Cast", [predictions], "float", to=graph.onnx.TensorProto.FLOAT)
    centre, size = graph.slice_last(predictions, 0, 2), graph.slice_last(predictions, 2, 4)
    half = graph.one("Mul", [size, graph.constant("half", np.float32(0.5))], "half_size")
    boxes = graph.one("Concat", [graph.one("Sub", [centre, half], "x1y1"), graph.one("Add", [centre, half], "x2y2")],
                      "boxes", axis=2)
    scores = graph.one("Mul", [graph.slice_last(predictions, 5, 2**62), graph.slice_last(predictions, 4, 5)], "scores")
    best_class = None
    if agnostic:
        scores, best_class = graph.node("TopK", [scores, graph.constant("k", np.array([1], np.int64))], "best",
                                        outputs=2, axis=2)
    return boxes, graph.one("Transpose", [scores], "scores_by_class", perm=[0, 2, 1]), best_class


def append_nms(model, settings: NmsSettings, opset: int):
    """`model` (an onnx ModelProto whose one output is the decoded (B, N, 5+nc)) with NMS appended: its outputs
    become NMS_OUTPUTS. The caller checks that the graph has at least max_det candidates."""
    import onnx

    graph = _Graph(onnx, model.graph, opset)
    (output,) = model.graph.output
    boxes, scores, best_class = _boxes_and_scores(graph, output.name, settings.agnostic)
    selected = graph.one("NonMaxSuppression", [
        boxes, scores, graph.constant("max_per_class", np.array([settings.max_det], np.int64)),
        graph.constant("iou", np.array([settings.iou_threshold], np.float32)),
        graph.constant("conf", np.array([settings.conf_threshold], np.float32))], "selected")  # (K, 3) [b, c, n]
    # Every (image, class, box) score NMS kept, -1 elsewhere; each image's best max_det of them, over all classes.
    padding = graph.one("ConstantOfShape", [graph.one("Shape", [scores], "shape")], "padding",
                        value=onnx.helper.make_tensor("value", onnx.TensorProto.FLOAT, [1], [PADDING]))
    kept = graph.one("ScatterND", [padding, selected, graph.one("GatherND", [scores, selected], "kept")], "kept")
    flat = graph.one("Reshape", [kept, graph.constant("shape", np.array([0, -1], np.int64))], "flat")
    top_scores, top_index = graph.node("TopK", [flat, graph.constant("k", np.array([settings.max_det], np.int64))],
                                       "top", outputs=2, axis=1)
    boxes_per_image = graph.dimension(scores, 2)
    box_index = graph.one("Mod", [top_index, boxes_per_image], "box_index")
    gather_shape = graph.one("Concat", [graph.one("Shape", [top_index], "shape"),
                                        graph.constant("four", np.array([4], np.int64))], "gather_shape", axis=0)
    box_index_3d = graph.unsqueeze(box_index, 2)
    top_boxes = graph.one("GatherElements", [boxes, graph.one("Expand", [box_index_3d, gather_shape], "index")],
                          "top_boxes", axis=1)
    if best_class is None:
        top_class = graph.unsqueeze(graph.one("Div", [top_index, boxes_per_image], "class_index"), 2)
    else:
        top_class = graph.one("GatherElements", [best_class, box_index_3d], "top_class", axis=1)
    top_class = graph.one("Cast", [top_class], "class", to=onnx.TensorProto.FLOAT)
    rows = graph.one("Concat", [top_boxes, graph.unsqueeze(top_scores, 2), top_class], "rows", axis=2)
    valid = graph.one("Greater", [top_scores, graph.constant("padding", np.float32(PADDING / 2))], "valid")
    detections = graph.one("Where", [graph.unsqueeze(valid, 2), rows, graph.constant("pad", np.float32(PADDING))],
                           "detections")
    count = graph.sum_over(graph.one("Cast", [valid], "valid_int", to=onnx.TensorProto.INT64), 1)
    del model.graph.output[:]
    batch = output.type.tensor_type.shape.dim[0]
    batch = batch.dim_param or batch.dim_value
    for name, source, element_type, shape in (
            (NMS_OUTPUTS[0], detections, onnx.TensorProto.FLOAT, [batch, settings.max_det, 6]),
            (NMS_OUTPUTS[1], count, onnx.TensorProto.INT64, [batch])):
        model.graph.node.append(onnx.helper.make_node("Identity", [source], [name], name=f"nms/{name}"))
        model.graph.output.append(onnx.helper.make_tensor_value_info(name, element_type, shape))
    return model


def check_candidates(candidates: int, num_classes: int, settings: NmsSettings) -> None:
    """The graph picks each image's max_det best among candidates x classes (x 1 when agnostic) scores."""
    available = candidates * (1 if settings.agnostic else num_classes)
    if available < settings.max_det:
        raise UserError(f"--max-det {settings.max_det} is more than this input's {available} candidate "
                        f"detections: lower --max-det or export a larger --imgsz")
