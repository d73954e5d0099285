# launch.sh — sourced by the one-node recipes (gpt2.sh, llama3.sh): runs ./train_gpt with the
# recipe's flags on GPUS ranks of this machine, one per GPU.
#   launch_train GPUS OUT FLAGS...
# LAUNCH=print prints the flags (shell-quoted) instead, e.g. for several nodes:
#   eval "sbatch --nodes=2 scripts/slurm.sbatch $(LAUNCH=print scripts/gpt2.sh 124M)"
# One GPU runs ./train_gpt itself; more run it under mpirun, each rank with its share of the
# host's cores (OMP_NUM_THREADS), as root with OpenMPI's two ALLOW variables (rented nodes often
# log in as root). Tested with the recipes in test/test_cli.sh.
launch_train() {
    local gpus=$1 out=$2; shift 2
    if [ "${LAUNCH:-run}" = print ]; then printf '%q ' "$@"; echo; exit 0; fi
    make -s train_gpt
    mkdir -p "$out"
    if [ "$gpus" = 1 ]; then exec ./train_gpt "$@"; fi
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / gpus > 0 ? $(nproc) / gpus : 1 ))}
    if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
    exec mpirun -np "$gpus" --bind-to none -x OMP_NUM_THREADS ./train_gpt "$@"
}
