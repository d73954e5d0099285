"""
hellaswag.py — downloads HellaSwag's validation set (10,042 examples, 11 MB of jsonl) and writes
data/hellaswag_val.bin, the eval file train_gpt --hellaswag reads, with this project's ./tokenize
(GPT-2 BPE: each context's tokens, each ending's with a space before it, as llm.c does; its
hellaswag_val.bin is the same format and loads too). Needs internet and a built ./tokenize.

usage: python3 dev/data/hellaswag.py [--out-dir data] [--split val|train]
then:  ./train_gpt --hellaswag data/hellaswag_val.bin ...   (scored at each --val-every), or
       ./train_gpt --model data/gpt2_124M.bin --steps 0 --hellaswag data/hellaswag_val.bin   (only that;
       dev/data/gpt2_weights.py writes data/gpt2_124M.bin)
GPT-2's scores with this scoring (llm.c's dev/data/hellaswag.py): 124M 29.55%, 1558M 48.93%; chance 25%.
"""
import argparse
import os
import subprocess
import urllib.request

URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_{}.jsonl"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default="data")
    ap.add_argument("--split", default="val", choices=["val", "train"])  # the test split has no labels
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    jsonl = os.path.join(args.out_dir, f"hellaswag_{args.split}.jsonl")
    if not os.path.exists(jsonl):
        print(f"downloading {URL.format(args.split)}")
        urllib.request.urlretrieve(URL.format(args.split), jsonl + ".tmp")
        os.replace(jsonl + ".tmp", jsonl)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([os.path.join(root, "tokenize"), "--tokenizer", os.path.join(root, "data/gpt2_tokenizer.bin"),
                    "--hellaswag", jsonl, os.path.join(args.out_dir, f"hellaswag_{args.split}.bin")], check=True)


if __name__ == "__main__":
    main()
