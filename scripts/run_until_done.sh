#!/usr/bin/env bash
# run_until_done — keeps a training run going on a rented node until it is done.
#
# It runs the training command. When the command ends without finishing (a crash, an out-of-memory
# kill, a NCCL error, a node reboot), it runs it again with --resume, from the newest checkpoint in
# its --output-dir, and so on until the command exits 0. Not retried, because a restart would fail
# the same way: a bad command line (exit 2); a run that diverged or stopped learning (exit 3:
# a resume repeats it bit for bit); a run without room for its last checkpoint (exit 4); and a
# run that fails STUCK times in a row without writing a new checkpoint. A stop asked of this
# script (SIGTERM, SIGINT, SIGUSR1) is passed to the trainer, which checkpoints and exits; the
# script then exits too.
#
# usage: scripts/run_until_done.sh COMMAND...     (COMMAND has --output-dir; mpirun ... is fine)
#   RESTARTS=N       the most restarts before it gives up (100)
#   STUCK=N          the most failures in a row without a new checkpoint (3)
#   RESTART_WAIT=S   seconds between a failure and the restart (10)
# e.g.   scripts/run_until_done.sh mpirun -np 8 ./train_gpt --model gpt2:124M ... --output-dir out/124M \
#            --checkpoint-every 1000
# Tested by test/test_cli.sh (the trainer killed twice under it: the run ends as an unbroken one).
set -u
[ $# -gt 0 ] || { echo "usage: scripts/run_until_done.sh COMMAND... (a training command with --output-dir)" >&2; exit 2; }
restarts=${RESTARTS:-100} stuck_most=${STUCK:-3} wait_s=${RESTART_WAIT:-10}
out="" resume=0 prev=""
for a in "$@"; do  # the command's --output-dir, and whether it already has --resume
    [ "$prev" = --output-dir ] && out=$a
    case $a in --output-dir=*) out=${a#--output-dir=} ;; --resume|--resume=1) resume=1 ;; esac
    prev=$a
done
[ -n "$out" ] || { echo "run_until_done: the command has no --output-dir: without checkpoints a restart would start over" >&2; exit 2; }

child=0 stopping=0
forward() { stopping=1; [ "$child" -gt 0 ] && kill -"$1" "$child" 2>/dev/null; }
trap 'forward TERM' TERM; trap 'forward INT' INT; trap 'forward USR1' USR1
newest() { ls -d "$out"/step_[0-9][0-9][0-9][0-9][0-9][0-9][0-9][0-9] 2>/dev/null | tail -1; }

n=0 stuck=0 seen=$(newest)
while :; do
    args=("$@")
    # a checkpoint there: continue it (a fresh run would refuse the directory)
    [ $resume = 0 ] && [ -n "$(newest)" ] && args+=(--resume)
    "${args[@]}" &
    child=$!
    while :; do wait "$child"; rc=$?; kill -0 "$child" 2>/dev/null || break; done  # (a trapped signal ends wait early)
    child=0
    if [ $rc = 0 ]; then echo "run_until_done: the run is done (after $n restart(s))" >&2; exit 0; fi
    if [ $stopping = 1 ]; then echo "run_until_done: stopped on request (the trainer's exit: $rc)" >&2; exit "$rc"; fi
    if [ $rc = 2 ]; then echo "run_until_done: the command was refused (exit 2): not retried" >&2; exit 2; fi
    if [ $rc = 3 ]; then echo "run_until_done: the run diverged or stopped learning (exit 3): not retried, a resume would repeat it" >&2; exit 3; fi
    if [ $rc = 4 ]; then echo "run_until_done: the run ended without room for its last checkpoint (exit 4): not retried; free some space in $out, then run this again" >&2; exit 4; fi
    last=$(newest)
    if [ "$last" = "$seen" ]; then stuck=$((stuck + 1)); else stuck=0 seen=$last; fi
    if [ "$stuck" -ge "$stuck_most" ]; then
        echo "run_until_done: the run failed $stuck times in a row (exit $rc) without a new checkpoint after ${last:-the start}; giving up (STUCK=$stuck_most)" >&2
        exit 1
    fi
    if [ "$n" -ge "$restarts" ]; then echo "run_until_done: the run failed $((n + 1)) times (exit $rc); giving up (RESTARTS=$restarts)" >&2; exit 1; fi
    n=$((n + 1))
    echo "run_until_done: the run ended with exit $rc; restart $n of at most $restarts in ${wait_s} s, from ${last:-the start (no checkpoint yet)}" >&2
    sleep "$wait_s" & wait $! 2>/dev/null
    [ $stopping = 1 ] && { echo "run_until_done: stopped on request" >&2; exit 1; }
done
