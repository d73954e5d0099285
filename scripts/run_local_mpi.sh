#!/usr/bin/env bash
# run_local_mpi.sh — N processes on this machine, data parallel (DDP or ZeRO), CPU backend.
# usage: scripts/run_local_mpi.sh N [train_gpt flags...]
#   e.g. scripts/run_local_mpi.sh 2 --model d4 --batch-size 4 --seq-len 64 --zero 2 --steps 50
# Each rank gets OMP_NUM_THREADS = cores / N. As root, OpenMPI needs the two ALLOW variables.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:?usage: $0 N [flags...]}; shift
make -s train_gpt
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / n > 0 ? $(nproc) / n : 1 ))}
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
exec mpirun --oversubscribe --bind-to none -np "$n" ./train_gpt --device cpu "$@"
