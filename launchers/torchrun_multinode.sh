#!/bin/bash
# DDP over several nodes without a scheduler: run this on every node with the same HEAD.
#   HEAD=node0 NNODES=2 GPUS=8 launchers/torchrun_multinode.sh +experiment=h100_bf16
# (Alternatively let bench launch per node itself:
#   python -m bench distributed=ddp distributed.nnodes=2 distributed.node_rank=<0|1> \
#       distributed.nproc_per_node=8 distributed.rdzv_endpoint=node0:29500 ...)
# PYTHON: the interpreter bench and torch are installed in (default: python3 on PATH).
set -euo pipefail
: "${HEAD:?set HEAD to the hostname of the first node}"
NNODES=${NNODES:-2}
GPUS=${GPUS:-8}
PORT=${PORT:-29500}
RUN_DIR=${RUN_DIR:-outputs/torchrun-$(date +%Y%m%d-%H%M)}
# The same on every node whatever minute each started in (the nodes meet only under one id), and
# without a `/`: torchrun makes its log folder from the id (a `/` in it failed every start).
RDZV_ID=${RDZV_ID:-bench-$HEAD-$PORT}

# torchrun (bench.tools.torchrun: a stop signal is one line and exit 130/143, not a traceback and 1);
# its own logs go in the run's folder, not a torchelastic_* folder left in /tmp for good
exec "${PYTHON:-python3}" -m bench.tools.torchrun --nnodes "$NNODES" --nproc-per-node "$GPUS" --log-dir "$RUN_DIR/torchrun" \
    --rdzv-backend c10d --rdzv-endpoint "$HEAD:$PORT" --rdzv-id "$RDZV_ID" \
    -m bench distributed=ddp distributed.nproc_per_node="$GPUS" distributed.nnodes="$NNODES" \
    hydra.run.dir="$RUN_DIR" "$@"
