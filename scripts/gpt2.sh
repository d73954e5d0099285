#!/usr/bin/env bash
# gpt2.sh — GPT-2 124M, 350M, 774M or 1558M from scratch on FineWeb, on the GPUs of one node.
# usage: scripts/gpt2.sh 124M|350M|774M|1558M [extra train_gpt flags, e.g. --resume]
#   GPUS=8          ranks (one per GPU; data parallel, ZeRO-1)
#   TOKENS=10e9     training tokens (FineWeb sample-10BT: dev/data/fineweb.py writes data/fineweb_*.bin)
#   OUT=runs/gpt2_SIZE   checkpoints (every 1000 steps, the newest 3 kept) and log.jsonl
#   LAUNCH=print    print the train_gpt flags (shell-quoted) instead of running, e.g. for several nodes:
#                   eval "sbatch --nodes=2 scripts/slurm.sbatch $(LAUNCH=print scripts/gpt2.sh 124M)"
# Every 250 steps: the validation loss over the same 10,485,760 tokens for every size, GPU count
# and B (--val-tokens), and HellaSwag where data/hellaswag_val.bin exists (dev/data/hellaswag.py).
# Hyperparameters: GPT-3's for the nearest size (learning rate, 0.5M or 1M tokens a step, warmup
# over 375M tokens, cosine to 10%, AdamW β2 0.95, weight decay 0.1, clip 1.0, T = 1024). B per GPU
# is what fitted one H100 80GB in `make bench`; gradient accumulation makes up the step.
# On a GPU with less memory the trainer refuses a B that cannot fit and names one that does: pass
# it after the size (`scripts/gpt2.sh 350M --batch-size 16`) or use `--batch-size auto`.
# FP8 is not recommended here: on an H200 it is slower than bf16 at 1558M (docs/performance.md).
# Why each choice, and the other flags that help (--recompute full, --skip-loss-z):
# docs/parallelism.md ("The recipe's choices").
# Stop with SIGUSR1 to mpirun (a checkpoint after the step; see the README); go on with --resume.
# Tested: test/test_cli.sh runs each size's flags for one step of a tiny model on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:?usage: $0 124M|350M|774M|1558M [train_gpt flags...]}; shift
case $size in  # B per GPU, tokens a step, peak learning rate
    124M)  B=64; batch=524288;  lr=6e-4 ;;
    350M)  B=32; batch=524288;  lr=3e-4 ;;
    774M)  B=32; batch=524288;  lr=2.5e-4 ;;
    1558M) B=16; batch=1048576; lr=2e-4 ;;
    *) echo "gpt2.sh: unknown size '$size' (124M, 350M, 774M or 1558M)" >&2; exit 2 ;;
esac
gpus=${GPUS:-8}
tokens=$(awk "BEGIN { printf \"%.0f\", ${TOKENS:-10e9} }")  # (%d would stop at 2^31 in some awks)
steps=$(( tokens / batch )) warmup=$(( 375000000 / batch ))
out=${OUT:-runs/gpt2_$size}
hellaswag=()
[ -f data/hellaswag_val.bin ] && hellaswag=(--hellaswag data/hellaswag_val.bin)
flags=(--device cuda --model "gpt2:$size" --train-data "data/fineweb_train_*.bin" --val-data "data/fineweb_val_*.bin"
       --batch-size $B --seq-len 1024 --total-batch-tokens $batch --steps $steps
       --lr $lr --warmup-steps $warmup --lr-schedule cosine --final-lr-frac 0.1
       --beta2 0.95 --weight-decay 0.1 --grad-clip 1.0 --zero 1
       --val-every 250 --val-tokens 10485760 ${hellaswag[@]+"${hellaswag[@]}"} --sample-every 5000 --gen-tokens 64
       --output-dir "$out" --checkpoint-every 1000 --keep-checkpoints 3 --log-file "$out/log.jsonl" "$@")
source scripts/launch.sh
launch_train "$gpus" "$out" "${flags[@]}"
