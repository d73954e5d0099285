# mpi_setup — the preamble of the tests that run the trainer under mpirun (test_dp.sh,
# test_tp.sh), sourced after BIN is set: a scratch directory $tmp removed on exit, the check
# that mpirun and an MPI build are there (else one "not ok" line naming TEST_NAME, and exit 1),
# OpenMPI allowed to run as root, one OpenMP thread a rank, and mpi N ARGS... to run BIN on N
# ranks.
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! command -v mpirun >/dev/null || ! "$BIN" --help | grep -q -- "--comm-stats"; then
    echo "not ok - $TEST_NAME needs mpirun and a train_gpt built with MPI"; exit 1
fi
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1   # up to 4 ranks share the cores
mpi() { local n=$1; shift; mpirun --oversubscribe -np "$n" "$BIN" "$@"; }
