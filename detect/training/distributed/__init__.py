"""torch.distributed as the trainer uses it: one DistContext and the process group's join (context.py), collectives
that do nothing at world size 1 (collectives.py), the ranks' heartbeats (liveness.py), and the launch of one rank
per device of `--device 0,1,2,3` outside torchrun (launch.py).

Launched by torchrun (one node or many), or by `launch_ranks` (torch's elastic launcher, what torchrun runs: yolov5
falls back to DataParallel here), which runs the same command line once per device. When a worker process dies,
torchrun's agent stops the others within its monitor interval and names it; a rank that hangs instead is caught by
--dist-timeout, which every collective inherits: the rank that waited names the ranks whose heartbeats in the job's
store stopped and the collective it waited in (collective_failure). Rank-local work of any length (label checks,
caches; the main rank's AutoAnchor, AMP timing and check and labels.png) waits at patient_barrier, under no deadline.
"""

from detect.training.distributed.collectives import (
    all_gather_objects,
    any_rank,
    broadcast_object,
    broadcast_tensors,
    collective_failure,
    entering,
    gather_objects,
    main_rank_answer,
    patient_barrier,
    replicas_in_sync,
)
from detect.training.distributed.context import (
    DistContext,
    destroy_process_group,
    host_cores,
    init_process_group,
    join_attempt,
    one_voice,
    stop_signals_handled_by,
)
from detect.training.distributed.launch import launch_ranks
from detect.training.distributed.liveness import JobStore

__all__ = ["DistContext", "JobStore", "all_gather_objects", "any_rank", "broadcast_object", "broadcast_tensors",
           "collective_failure", "destroy_process_group", "entering", "gather_objects", "host_cores",
           "init_process_group", "join_attempt", "launch_ranks", "main_rank_answer", "one_voice", "patient_barrier",
           "replicas_in_sync", "stop_signals_handled_by"]
