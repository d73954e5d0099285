#!/usr/bin/env bash
# test_tokenizer — our C++ GPT-2 BPE against the reference (npm gpt-3-encoder) on real text,
# token for token, and decode(encode(x)) == x byte for byte.
# Texts: the shipped validation text (decoded), this project's own sources (Greek, math and
# arrows in the comments), and a sample with accents, CJK, emoji, digits, contractions and
# runs of whitespace. Prints "ok"/"not ok" lines.
set -u
cd "$(dirname "$0")/.."
export NODE_PATH=build/node_modules
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

./tokenize --decode data/kjv_val_000000.bin | sed '1s/^<|endoftext|>//' > "$tmp/kjv_val.txt"
printf "Hello   world!! It's 2024; they'll say \"naïve café\" — ½ of 3.14159 is 1.570795.\n\n\tTabs\tand  trailing   \n日本語のテキスト、中文文本。 Emoji: 🚀🔥👍🏽 Ünïcödé ÅÆØ\r\nI'd've thought you'RE right: x²+y²=z², Σ → ∞\n   \n" > "$tmp/unicode.txt"
cp README.md "$tmp/readme.txt"
cat llmc/*.h llmc/*.cuh > "$tmp/sources.txt"

status=0
for f in kjv_val unicode readme sources; do
    in="$tmp/$f.txt"
    if ! node test/bpe_reference.js "$in" > "$tmp/$f.ref.json"; then
        echo "not ok - tokenizer $f: the reference encoder failed"; status=1; continue
    fi
    ./tokenize "$in" "$tmp/$f.bin" 2>/dev/null
    /usr/bin/python3 - "$tmp/$f.bin" "$tmp/$f.ref.json" "$f" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
ours = list(struct.unpack("<%dH" % ((len(data) - 1024) // 2), data[1024:]))
ref = json.load(open(sys.argv[2]))
name = sys.argv[3]
assert ours[0] == 50256
ours = ours[1:]
first = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), None)
if ours == ref:
    print(f"ok - tokenizer {name}: {len(ours)} tokens identical to the reference GPT-2 BPE")
else:
    print(f"not ok - tokenizer {name}: {len(ours)} vs {len(ref)} tokens, first difference at {first}: "
          f"{ours[first - 2:first + 3] if first else ''} vs {ref[first - 2:first + 3] if first else ''}")
PY
    if { printf '<|endoftext|>'; cat "$in"; } | cmp -s - <(./tokenize --decode "$tmp/$f.bin"); then
        echo "ok - tokenizer $f: decode(encode(x)) == x"
    else
        echo "not ok - tokenizer $f: decode(encode(x)) != x"
    fi
done
