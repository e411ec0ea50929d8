"""Run by tests/training/test_distributed_validation.py, once per rank under torchrun or once alone: the final
evaluation of WEIGHTS on DATA's val split at IMGSZ and BATCH, spread over the job's ranks; the scoring rank writes
its plots and metrics.json into OUT."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from detect import backend
from detect.data import ValLoaderSettings, build_val_loader, load_data_config, load_split
from detect.evaluation.evaluator import CocoEvaluator
from detect.evaluation.final import final_evaluation
from detect.evaluation.val_loop import PassOptions
from detect.inference.runtimes.torch_model import TorchInference
from detect.models.weights import load_model
from detect.training.distributed import DistContext, destroy_process_group, init_process_group
from detect.training.trainer import JobExchange


def main(weights: str, data: str, imgsz: int, batch: int, out: str) -> None:
    context = init_process_group(DistContext.from_env(), "gloo", 120)
    cpu = backend.select("cpu")
    settings = ValLoaderSettings(imgsz, batch, 0, pin_memory=False, rank=context.rank, world_size=context.world_size)
    loader = build_val_loader(load_split(load_data_config(data), "val"), settings)
    evaluator = CocoEvaluator.for_split(loader.split) if context.is_main else None
    options = PassOptions(progress=False, exchange=JobExchange.of(context, cpu.device))
    predict = TorchInference(load_model(weights), cpu)
    metrics = final_evaluation(predict, Path(weights), loader, evaluator, cpu, Path(out), options=options)
    if context.is_main:
        values = {key: value.tolist() if isinstance(value, np.ndarray) else value
                  for key, value in dataclasses.asdict(metrics).items()}
        (Path(out) / "metrics.json").write_text(json.dumps(values))
    destroy_process_group(context)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
