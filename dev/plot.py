#!/usr/bin/env python3
"""
plot.py — a picture of one or more training runs, from the trainer's JSON-lines logs (--log-file).

    dev/plot.py LOG.jsonl [LOG2.jsonl ...] -o curve.png [--label A --label B] [--ref 124M|350M|774M|1558M|none]

Panels: train and validation loss, learning rate, gradient norm, tokens/s, and HellaSwag accuracy
when a log has it. Runs are drawn over each other, one colour each. With --ref, the loss and
HellaSwag panels get the OpenAI GPT-2 checkpoints' values as dashed lines (llm.c's notebook uses
the same ones), and HellaSwag gets the GPT-3 paper's too. The validation loss line is only
comparable on the same validation data (FineWeb's, for GPT-2's line).
A step logged twice (a resumed run) keeps its last line. A malformed line stops with one line
naming the file and line. Test: test/run_tests.sh ("plot").
"""
import argparse
import json
import math
import sys

# OpenAI's GPT-2 checkpoints on FineWeb's validation tokens and on HellaSwag (llm.c's dev/vislog.ipynb),
# and GPT-3's HellaSwag (zero-shot, the GPT-3 paper's table; 1.3B stands beside 1558M)
GPT2_VAL_LOSS = {"124M": 3.424958, "350M": 3.083089, "774M": 3.000580, "1558M": 2.831273}
GPT2_HELLASWAG = {"124M": 0.294463, "350M": 0.375224, "774M": 0.431986, "1558M": 0.488946}
GPT3_HELLASWAG = {"124M": 0.337, "350M": 0.436, "774M": 0.510, "1558M": 0.547}


def fail(msg):
    print(f"plot.py: {msg}", file=sys.stderr)
    sys.exit(2)


def read_log(path):
    """{field: {step: value}} of one log; later lines win (a resumed run logs some steps again)"""
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        fail(f"{path}: cannot read it ({e.strerror})")
    streams = {}
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"{path}:{n}: not a JSON object ({e.msg}): {line[:60]!r}")
        if not isinstance(r, dict) or not isinstance(r.get("step"), int):
            fail(f"{path}:{n}: a log line needs an integer \"step\": {line[:60]!r}")
        for key in ("loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "hellaswag_acc"):
            v = r.get(key)
            if isinstance(v, (int, float)) and math.isfinite(v):  # (null: a non-finite loss or norm)
                streams.setdefault(key, {})[r["step"]] = float(v)
    if not streams.get("loss") and not streams.get("val_loss"):
        fail(f"{path}: no step with a loss (is it a log written by --log-file?)")
    return {k: sorted(v.items()) for k, v in streams.items()}


def main():
    ap = argparse.ArgumentParser(description="Plot training runs from the trainer's JSON-lines logs.")
    ap.add_argument("logs", nargs="+", help="the --log-file of each run")
    ap.add_argument("-o", "--output", required=True, help="the PNG to write")
    ap.add_argument("--label", action="append", help="a run's name, once per log in order (default: the file names)")
    ap.add_argument("--ref", default="none", choices=["none"] + list(GPT2_VAL_LOSS), help="GPT-2/GPT-3 reference lines for this size")
    a = ap.parse_args()
    labels = a.label or [p.rsplit("/", 1)[-1] for p in a.logs]
    if len(labels) != len(a.logs):
        fail(f"--label names {len(labels)} runs, but {len(a.logs)} logs were given")
    runs = [read_log(p) for p in a.logs]  # (every log is read before anything is drawn)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hella = any("hellaswag_acc" in r for r in runs)
    panels = [("loss", "loss (solid: train, dashed: validation)"), ("lr", "learning rate"), ("grad_norm", "gradient norm"),
              ("tokens_per_s", "tokens/s")] + ([("hellaswag_acc", "HellaSwag accuracy")] if hella else [])
    cols = (len(panels) + 1) // 2  # two rows
    fig, axes = plt.subplots(2, cols, figsize=(5.5 * cols, 8), squeeze=False)
    axes = axes.flatten()
    for ax in axes[len(panels):]:
        ax.axis("off")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for (key, title), ax in zip(panels, axes):
        for i, (run, label) in enumerate(zip(runs, labels)):
            c = colors[i % len(colors)]
            if key in run:
                xs, ys = zip(*run[key])
                ax.plot(xs, ys, color=c, label=label, marker="o" if key == "hellaswag_acc" else None)
            if key == "loss" and "val_loss" in run:
                xs, ys = zip(*run["val_loss"])
                ax.plot(xs, ys, color=c, linestyle="--", marker="o", markersize=3, label=f"{label} (val)")
        if a.ref != "none" and key == "loss":
            ax.axhline(GPT2_VAL_LOSS[a.ref], color="r", linestyle=":", label=f"GPT-2 {a.ref} checkpoint, FineWeb val")
        if a.ref != "none" and key == "hellaswag_acc":
            ax.axhline(GPT2_HELLASWAG[a.ref], color="r", linestyle=":", label=f"GPT-2 {a.ref} checkpoint")
            ax.axhline(GPT3_HELLASWAG[a.ref], color="g", linestyle=":", label=f"GPT-3 {a.ref} (paper)")
        if key in ("loss", "grad_norm"):
            ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if key in ("loss", "hellaswag_acc") or len(runs) > 1 and key == "tokens_per_s":
            ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        fig.savefig(a.output, dpi=90)
    except OSError as e:
        fail(f"{a.output}: cannot write it ({e.strerror})")
    print(f"plot.py: {len(runs)} run(s), {len(panels)} panels -> {a.output}")


if __name__ == "__main__":
    main()
