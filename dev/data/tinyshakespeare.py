"""
tinyshakespeare.py — downloads Karpathy's tiny-shakespeare (1 MB) and tokenizes it into
data/tinyshakespeare_{train,val}_*.bin with this project's ./tokenize (GPT-2 BPE).
Needs internet and a built ./tokenize (run `make` first).

usage: python3 dev/data/tinyshakespeare.py [--out-dir data]
then:  ./train_gpt --train-data "data/tinyshakespeare_train_*.bin" --val-data "data/tinyshakespeare_val_*.bin" ...
The validation split is the last 10% of the text (cut at a line boundary), as in llm.c.
"""
import argparse
import os
import subprocess
import urllib.request

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default="data")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    text_path = os.path.join(args.out_dir, "tinyshakespeare.txt")
    if not os.path.exists(text_path):
        print(f"downloading {URL}")
        urllib.request.urlretrieve(URL, text_path)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([os.path.join(root, "tokenize"), "--tokenizer", os.path.join(root, "data/gpt2_tokenizer.bin"),
                    "--output-prefix", os.path.join(args.out_dir, "tinyshakespeare"), "--val-fraction", "0.1",
                    text_path], check=True)


if __name__ == "__main__":
    main()
