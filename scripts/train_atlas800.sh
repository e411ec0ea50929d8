#!/usr/bin/env bash
# Train on Atlas 800 machines, 8 x Ascend 910B each, through torchrun and HCCL.
#
#   one node:     scripts/train_atlas800.sh --cfg yolov5s.yaml --data coco.yaml --batch-size 512 --epochs 300
#   two nodes:    scripts/train_atlas800.sh --nnodes 2 --node-rank 0 --master-addr 10.0.0.1 -- --cfg yolov5s.yaml ...
#                 scripts/train_atlas800.sh --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 -- --cfg yolov5s.yaml ...
#
# Everything after the launcher options (or after --) goes to `python -m detect.train`; --batch-size is the global
# batch (Huawei's yolov5s runs used 64 per card, 512 on 8 cards). detect's --dist-timeout follows HCCL_EXEC_TIMEOUT, so
# that a silent rank is named by detect (one line) when HCCL would give up too (docs/scale.md, Timeouts); each rank
# and its loader workers run on their own host cores, NUMA-local to the NPU (--cpu-affinity auto, or CPU_AFFINITY). MAX_RESTARTS=N lets torchrun restart a failed job
# up to N times; each restart resumes from the run's weights/last.pt by itself. The HCCL and CANN settings below are
# the ones docs/torch-npu.md ("Environment variables") gives; override any of them by exporting it first.
set -euo pipefail

nnodes=1 node_rank=0 master_addr=127.0.0.1 master_port=${MASTER_PORT:-29500} nproc=${NPROC_PER_NODE:-8}
while [[ $# -gt 0 ]]; do
    case "$1" in
        --nnodes) nnodes=$2; shift 2 ;;
        --node-rank) node_rank=$2; shift 2 ;;
        --master-addr) master_addr=$2; shift 2 ;;
        --master-port) master_port=$2; shift 2 ;;
        --nproc-per-node) nproc=$2; shift 2 ;;
        --) shift; break ;;
        *) break ;;
    esac
done

# CANN's environment (set_env.sh puts the toolkit's libraries and tools on the paths torch_npu needs).
for cann in "${ASCEND_TOOLKIT_HOME:-}" /usr/local/Ascend/ascend-toolkit/latest /usr/local/Ascend/ascend-toolkit; do
    if [[ -n "$cann" && -f "$cann/set_env.sh" ]]; then
        set +u; source "$cann/set_env.sh"; set -u
        break
    fi
done

export HCCL_CONNECT_TIMEOUT=${HCCL_CONNECT_TIMEOUT:-1200}  # seconds to form the communicator (default 120)
export HCCL_EXEC_TIMEOUT=${HCCL_EXEC_TIMEOUT:-1800}        # seconds a collective may wait (= --dist-timeout below)
# The NIC HCCL binds to: the address of the interface this machine reaches the master through (`ip route get`'s src),
# not the first of `hostname -I`, whose order is undefined (a docker bridge may come first).
if [[ -z "${HCCL_IF_IP:-}" ]]; then
    if command -v ip >/dev/null; then
        HCCL_IF_IP=$(ip route get "$master_addr" 2>/dev/null | awk '{for (i = 1; i < NF; i++) if ($i == "src") {print $(i + 1); exit}}')
    fi
    if [[ -n "${HCCL_IF_IP:-}" ]]; then
        export HCCL_IF_IP
        echo "HCCL_IF_IP=$HCCL_IF_IP (the address that routes to the master, $master_addr; export HCCL_IF_IP to choose)"
    else
        unset HCCL_IF_IP
        echo "HCCL_IF_IP is not set: no route to $master_addr found (iproute2's ip); HCCL picks a NIC itself, export" \
            "HCCL_IF_IP to choose" >&2
    fi
fi
export TASK_QUEUE_ENABLE=${TASK_QUEUE_ENABLE:-2}             # Ascend's recommendation in binary mode (jit off)
export ASCEND_GLOBAL_LOG_LEVEL=${ASCEND_GLOBAL_LOG_LEVEL:-3}  # CANN logs: errors only
export ASCEND_GLOBAL_EVENT_ENABLE=${ASCEND_GLOBAL_EVENT_ENABLE:-0}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}                 # the loader workers are the host parallelism

exec torchrun --nnodes "$nnodes" --node_rank "$node_rank" --nproc_per_node "$nproc" \
    --master_addr "$master_addr" --master_port "$master_port" --max_restarts "${MAX_RESTARTS:-0}" \
    -m detect.train --device npu --dist-timeout "$HCCL_EXEC_TIMEOUT" --cpu-affinity "${CPU_AFFINITY:-auto}" "$@"
