# mpi_setup — the preamble of the tests that run the trainer under mpirun (test_dp.sh,
# test_tp.sh, test_pp.sh, test_cp.sh), sourced after BIN is set: a scratch directory $tmp removed
# on exit, the check that mpirun and an MPI build are there (else one "not ok" line naming
# TEST_NAME, and exit 1), OpenMPI allowed to run as root, one OpenMP thread a rank, mpi N ARGS...
# to run BIN on N ranks, check_error for a flag the trainer must refuse (with the test's "common"
# flags), and the helpers that compare a parallel run with one process (run, close_losses,
# losses, same_run, alike); untied_llama writes a model file of a Llama whose classifier is its own.
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

# --- the equivalence tests' helpers (test_tp.sh, test_pp.sh, test_cp.sh), on the test's "common" flags
# close_losses A.jsonl B.jsonl NAME TOL [KEY [rel]]: per-step KEY (default loss) within TOL
# (relative to A's value with rel)
close_losses() {
    $PY - "$@" <<'PY'
import json, sys
a_path, b_path, name, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
key = sys.argv[5] if len(sys.argv) > 5 else "loss"
rel = len(sys.argv) > 6
def rows(p):
    try: return [json.loads(l) for l in open(p)]
    except (OSError, ValueError): return []
a, b = rows(a_path), rows(b_path)
pairs = [(x.get(key), y.get(key)) for x, y in zip(a, b) if x.get(key) is not None]
worst = max(abs(x - y) / (abs(x) if rel else 1) for x, y in pairs) if len(a) == len(b) > 0 and pairs else float("inf")
print(("ok" if worst <= tol else "not ok") + f" - {name}: {key} within {tol:g}{' relative' if rel else ''} of one process (max diff {worst:.1e})")
PY
}
# losses A.jsonl: every step's loss, exactly (repr)
losses() { $PY -c "import json,sys; [print(repr(json.loads(l)['loss'])) for l in open(sys.argv[1])]" "$1" 2>/dev/null; }
# same_run A B NAME: two runs' logs (losses, norms, lr) and final weights bit-identical
same_run() {
    local keep='import json, sys
for l in open(sys.argv[1]): d = json.loads(l); print(d["step"], repr(d["loss"]), repr(d["lr"]), repr(d["grad_norm"]))'
    if [ -s "$1.jsonl" ] && cmp -s <($PY -c "$keep" "$1.jsonl") <($PY -c "$keep" "$2.jsonl") && cmp -s "$1.bin" "$2.bin"; then
        echo "ok - $3: bit-identical (losses, norms, final weights)"
    else
        echo "not ok - $3: differs"; tail -2 "$2.txt" | sed 's/^/#   /'
    fi
}
# run NAME RANKS ARGS...: one training into $tmp/NAME.{jsonl,bin,txt}
run() {
    local name=$1 n=$2; shift 2
    if [ "$n" = 1 ]; then "$BIN" "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" --save-model "$tmp/$name.bin" >"$tmp/$name.txt" 2>&1
    else mpi "$n" "${common[@]}" "$@" --log-file "$tmp/$name.jsonl" --save-model "$tmp/$name.bin" >"$tmp/$name.txt" 2>&1; fi ||
        { echo "not ok - $name: run failed"; tail -3 "$tmp/$name.txt" | sed 's/^/#   /'; return 1; }
}
# alike REF NAME INIT LABEL: the losses (1e-5: the same math, some sums in another order) and
# every tensor's change from INIT (1e-4 relative: test_tp.sh says why) of run NAME against REF
alike() {
    close_losses "$tmp/$1.jsonl" "$tmp/$2.jsonl" "$4" 1e-5
    $PY test/compare_models.py --updates "$tmp/$3.bin" "$tmp/$1.bin" "$tmp/$2.bin" 1e-4 | sed "s/ - / - $4: /"
}
# untied_llama PATH [V]: a Llama model file (a vocabulary of V, default GPT-2's 50257, padded to a
# multiple of 128; 4 blocks, C = 128, 4 query heads sharing 2 key/value heads, H = 384) with a
# classifier of its own (lm_head), random weights (test/gpt2_torch.py): no preset has one
untied_llama() {
    $PY - "$1" "${2:-50257}" <<'PY'
import sys
sys.path.insert(0, "test")
import gpt2_torch as ref
V = int(sys.argv[2])
cfg = dict(arch="llama", maxT=1024, V=V, Vp=(V + 127) // 128 * 128, L=4, NH=4, NKV=2, C=128, H=384, theta=10000, tied=False)
ref.write_model(sys.argv[1], cfg, ref.random_params(cfg, seed=11))
PY
}

