# mpi_setup — the preamble of the tests that run the trainer under mpirun (test_dp.sh,
# test_tp.sh, test_pp.sh), sourced after BIN is set: a scratch directory $tmp removed on exit,
# the check that mpirun and an MPI build are there (else one "not ok" line naming TEST_NAME, and
# exit 1), OpenMPI allowed to run as root, one OpenMP thread a rank, mpi N ARGS... to run BIN on
# N ranks, and check_error for a flag the trainer must refuse (with the test's "common" flags).
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if ! command -v mpirun >/dev/null || ! "$BIN" --help | grep -q -- "--comm-stats"; then
    echo "not ok - $TEST_NAME needs mpirun and a train_gpt built with MPI"; exit 1
fi
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
export OMP_NUM_THREADS=1   # up to 4 ranks share the cores
mpi() { local n=$1; shift; mpirun --oversubscribe -np "$n" "$BIN" "$@"; }
# check_error NAME RANKS PATTERN ARGS...: the trainer on RANKS ranks with common + ARGS exits 2
# with a line matching PATTERN
check_error() {  # check_error NAME RANKS PATTERN ARGS...
    local name=$1 n=$2 pat=$3; shift 3
    local out rc
    out=$(mpi "$n" "${common[@]}" "$@" 2>&1); rc=$?
    if [ $rc = 2 ] && echo "$out" | grep -q -- "$pat"; then echo "ok - $name: exit 2, '$pat'"
    else echo "not ok - $name: exit $rc"; echo "$out" | tail -2 | sed 's/^/#   /'; fi
}
