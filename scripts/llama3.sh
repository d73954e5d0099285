#!/usr/bin/env bash
# llama3.sh — continued training of a Llama 3 model file on text tokenized with its own tokenizer,
# on the GPUs of one node.
# usage: scripts/llama3.sh MODEL.bin [extra train_gpt flags, e.g. --resume]
# The three steps before it (README: Llama 3's weights and tokenizer):
#   python3 dev/data/llama3_to_model.py Llama-3.2-1B llama3.2-1b.bin          (Hugging Face's folder)
#   ./tokenize --tokenizer Llama-3.2-1B/original/tokenizer.model --jsonl --output-prefix data/llama3 corpus.jsonl
#   ./tokenize --tokenizer Llama-3.2-1B/original/tokenizer.model --hellaswag hellaswag_val.jsonl data/hellaswag_llama3.bin  (optional)
# Environment:
#   DATA=data/llama3     shards DATA_train_*.bin (uint32; ./tokenize writes them) and DATA_val_*.bin
#   TOKENIZER=PATH       the rank file (original/tokenizer.model), for a sample every 1000 steps
#   HELLASWAG=data/hellaswag_llama3.bin   scored at each validation where the file exists
#   GPUS=8  TOKENS=1e9  SEQ=2048  LR=3e-5  ZERO=1  OUT=runs/llama3
#   LAUNCH=print         print the train_gpt flags instead of running (scripts/launch.sh)
# Settings: a conservative starting point for continued pretraining, not tuned here: peak LR 3e-5
# (a tenth of Llama 3's pretraining peak), 0.5M tokens a step, linear warmup over 50M tokens, cosine
# decay to 10%, AdamW β2 0.95, weight decay 0.1, gradient clip 1.0, T = SEQ. B per GPU is the
# largest that fits (--batch-size auto, llmc/planner.h), the rest of the step by accumulation. The
# model state is 16 bytes a parameter at ZeRO 0 (bf16 weights and gradients, fp32 master and AdamW
# moments): Llama 3 8B's 128 GB; over 8 GPUs ZeRO-1 leaves 5.5 bytes a parameter on each (44 GB),
# ZeRO-3 2 (16 GB), so 8B wants ZERO=3 or 2 on 80 GB GPUs. Not yet run on a GPU.
# Tested: test/test_cli.sh runs its flags for one step of a tiny Llama on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:?usage: $0 MODEL.bin [train_gpt flags...] (a Llama model file: dev/data/llama3_to_model.py)}; shift
gpus=${GPUS:-8} seq=${SEQ:-2048} data=${DATA:-data/llama3} out=${OUT:-runs/llama3}
batch=524288
tokens=$(awk "BEGIN { printf \"%.0f\", ${TOKENS:-1e9} }")
steps=$(( tokens / batch )) warmup=$(( 50000000 / batch ))
extra=()
[ -n "${TOKENIZER:-}" ] && extra+=(--tokenizer "$TOKENIZER" --sample-every 1000 --gen-tokens 64)
hs=${HELLASWAG:-data/hellaswag_llama3.bin}
[ -f "$hs" ] && extra+=(--hellaswag "$hs")
flags=(--device cuda --model "$model" --train-data "${data}_train_*.bin" --val-data "${data}_val_*.bin"
       --batch-size auto --seq-len "$seq" --total-batch-tokens $batch --steps $steps
       --lr "${LR:-3e-5}" --warmup-steps $warmup --lr-schedule cosine --final-lr-frac 0.1
       --beta2 0.95 --weight-decay 0.1 --grad-clip 1.0 --zero "${ZERO:-1}"
       --val-every 250 --val-tokens 10485760 ${extra[@]+"${extra[@]}"}
       --output-dir "$out" --checkpoint-every 1000 --keep-checkpoints 3 --log-file "$out/log.jsonl" "$@")
source scripts/launch.sh
launch_train "$gpus" "$out" "${flags[@]}"
