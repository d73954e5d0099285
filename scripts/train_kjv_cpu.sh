#!/usr/bin/env bash
# train_kjv_cpu.sh — the CPU recipe behind `make train`, with checkpoints, so it can be stopped
# and resumed: a 4-layer GPT (d4, 16M parameters) on the shipped King James Bible.
# usage: scripts/train_kjv_cpu.sh [OUTPUT_DIR] [extra train_gpt flags, e.g. --resume]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-runs/kjv_d4}; shift || true
make -s train_gpt
mkdir -p "$out"
./train_gpt --device cpu --model d4 --batch-size 8 --seq-len 64 --steps 300 --lr 1e-3 --warmup-steps 20 \
    --shuffle 1 --val-every 50 --val-steps 16 --sample-every 100 --gen-tokens 64 --top-k 40 \
    --prompt "And God said" --output-dir "$out" --checkpoint-every 50 --log-file "$out/log.jsonl" "$@"
