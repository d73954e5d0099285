#!/usr/bin/env bash
# bench_tokenize — ./tokenize's speed against its thread count, on text from this repository (CPU).
#
# The text: the shipped Bible (decoded) and llmc/'s sources and the README, six times over
# (~26 MiB), as one text file, and as JSON lines of 5000 characters a document (--jsonl). Each is
# tokenized with 1, 2, 4, ... up to all cores (3 runs each; the speed is ./tokenize's own
# final line: input MiB over wall time, reading and writing included), and the shards of every
# thread count are compared with one thread's: they must be identical. The text file again with
# Llama 3's kind of tokenizer (a tiktoken rank file: cl100k_base's 100k ranks from the npm package
# tiktoken that `make test` installs into build/; skipped without it).
#
#   bash dev/bench/bench_tokenize.sh > dev/cpu_results/DATE-tokenize-threads.log
set -eu
cd "$(dirname "$0")/../.."
[ -x ./tokenize ] || make tokenize >&2
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for i in 1 2 3 4 5 6; do
    ./tokenize --decode data/kjv_train_000000.bin
    cat llmc/*.h llmc/*.cuh README.md
done > "$tmp/text.txt"
/usr/bin/python3 - "$tmp/text.txt" "$tmp/text.jsonl" <<'PY'
import json, sys
t = open(sys.argv[1], encoding="utf-8").read()
with open(sys.argv[2], "w") as f:
    for i in range(0, len(t), 5000): f.write(json.dumps({"text": t[i:i + 5000]}) + "\n")
PY
echo "# bench_tokenize, $(date -u +%F), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown);" \
     "$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'))"
echo "# text.txt $(wc -c < "$tmp/text.txt") bytes; text.jsonl $(wc -l < "$tmp/text.jsonl") documents, $(wc -c < "$tmp/text.jsonl") bytes"
echo
echo "| input (txt-ranks: the text file, cl100k_base's ranks under Llama 3's rules) | threads | MiB/s (3 runs) | shards identical to 1 thread's |"
echo "|---|---|---|---|"
status=0
inputs=(txt jsonl)
if NODE_PATH=build/node_modules node test/tiktoken_reference.js ranks "$tmp/cl100k.tiktoken" 2>/dev/null; then inputs+=(txt-ranks); fi
for input in "${inputs[@]}"; do
    opts=(); [ $input = jsonl ] && opts=(--jsonl)
    [ $input = txt-ranks ] && opts=(--tokenizer "$tmp/cl100k.tiktoken")
    t=1
    while [ $t -le "$(nproc)" ]; do
        speeds=""
        for run in 1 2 3; do
            rm -rf "$tmp/out$t"; mkdir -p "$tmp/out$t"
            s=$(./tokenize --threads $t "${opts[@]}" --output-prefix "$tmp/out$t/x" "$tmp/text.${input%-ranks}" 2>&1 \
                | sed -n 's/^tokenized .* \([0-9.]*\) MiB\/s$/\1/p')
            speeds="$speeds${speeds:+, }$s"
        done
        same=yes
        diff <(cd "$tmp/out1" && md5sum *) <(cd "$tmp/out$t" && md5sum *) >/dev/null || { same=NO; status=1; }
        echo "| $input | $t | $speeds | $same |"
        t=$((t * 2))
    done
done
exit $status
