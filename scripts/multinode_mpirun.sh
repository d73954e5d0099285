#!/usr/bin/env bash
# multinode_mpirun.sh — a multi-node launch with mpirun and a hostfile (8 ranks per node).
# usage: scripts/multinode_mpirun.sh HOSTFILE [train_gpt flags...]
#   HOSTFILE lines look like "node01 slots=8". The repository (and data) must be at the same
#   path on every node, and --output-dir on a file system all nodes share. The trainer checks
#   both before the first step (docs/parallelism.md). Ranks are placed by node, so tp peers are
#   neighbours: rank = ((dp·pp + pp_i)·cp + cp_i)·tp + tp_i.
#
# NCCL settings people set on real clusters (for the CUDA backend; harmless on CPU):
#   NCCL_SOCKET_IFNAME=eth0     the interface for NCCL's bootstrap/TCP traffic (not docker0/lo)
#   NCCL_IB_HCA=mlx5            which InfiniBand adapters to use (ibv_devices lists them)
#   NCCL_IB_DISABLE=1           only when there is no InfiniBand/RoCE
#   NCCL_DEBUG=INFO             prints the chosen transports and rings: check it once per cluster
#   NCCL_NET_GDR_LEVEL=PHB      GPUDirect RDMA when the NIC and GPU share a PCIe switch
# OpenMPI settings: -x exports a variable to every rank; --mca btl_tcp_if_include eth0 keeps
# MPI's own traffic off the wrong interface.
# Stopping: `kill -USR1 <mpirun's pid>` (mpirun forwards SIGUSR1 to every rank; it answers TERM
# and INT by killing them): with --output-dir the ranks end their step, write a checkpoint and exit.
set -euo pipefail
cd "$(dirname "$0")/.."
hostfile=${1:?usage: $0 HOSTFILE [flags...]}; shift
nodes=$(grep -cve '^\s*$' "$hostfile")
np=$(( nodes * ${RANKS_PER_NODE:-8} ))
exec mpirun -np "$np" --hostfile "$hostfile" --map-by ppr:${RANKS_PER_NODE:-8}:node --bind-to none \
    -x PATH -x LD_LIBRARY_PATH -x OMP_NUM_THREADS=${OMP_NUM_THREADS:-8} \
    -x NCCL_SOCKET_IFNAME -x NCCL_IB_HCA -x NCCL_DEBUG \
    ./train_gpt "$@"
