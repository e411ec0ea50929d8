"""scripts/trace_val_path.py: the stays of a traced call, and validation's path kept to its returns
(docs/architecture.md, "Validation's path")."""

from __future__ import annotations

from tests.scripts.modules import script

# The traced path's returns to a module already left (62 measured, 70 before the path was made one pass): a
# change that sends validation back and forth again fails here.
MAX_RETURNS = 63


def test_consecutive_calls_in_one_module_are_one_stay_and_a_later_one_a_return():
    trace = script("trace_val_path")
    calls = [("val.py", "validate"), ("val.py", "_prepare"), ("data/loader.py", "build"), ("val.py", "report")]
    walk = trace.walk_of(calls)
    assert walk.stays == ("val.py", "data/loader.py", "val.py")
    assert (walk.modules, walk.returns) == (2, 1)
    assert walk.lines()[-1] == "  3. val.py  (visit 2)"


def test_traced_calls_record_the_first_call_of_each_package_function_in_order():
    trace = script("trace_val_path")
    import torch

    from detect.ops.boxes import xywh_to_xyxy

    def twice(boxes):
        return xywh_to_xyxy(xywh_to_xyxy(boxes))

    result, calls = trace.traced_calls(twice, torch.zeros(1, 4))
    assert result.shape == (1, 4)
    assert calls[0] == ("ops/boxes.py", "xywh_to_xyxy") and len(calls) == len(set(calls))


def test_validation_returns_to_a_module_at_most_the_measured_times(tmp_path):
    walk = script("trace_val_path").trace_validation(tmp_path)
    assert walk.stays[0] == "val.py" and walk.modules > 20
    assert walk.returns <= MAX_RETURNS, "\n".join(walk.lines())
