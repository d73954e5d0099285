"""
compare_models — the largest elementwise difference between two llm.c fp32 model files.

usage: /usr/bin/python3 test/compare_models.py A.bin B.bin BOUND
       /usr/bin/python3 test/compare_models.py --updates INIT.bin A.bin B.bin BOUND
Prints one "ok"/"not ok" line: max |A − B| ≤ BOUND over every parameter except the key bias
(qkvb[:, C:2C]), whose gradient is zero in exact arithmetic, so that runs differing only in
summation order move it by Adam-normalized round-off noise (see test_vs_pytorch.py).
--updates: compares what the two trainings changed, tensor by tensor, with both starting from
INIT: ‖ΔA − ΔB‖ / ‖ΔA‖ ≤ BOUND for each of the 16 tensors (Δ = final − INIT; the key bias left
out as above). A relative bound per tensor holds where a few elements with gradients at the
round-off level move apart by a sizeable part of the learning rate (Adam divides by √v), and
still fails a tensor whose slice is wrong, whatever its size.
"""
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
        assert h[0] in (20240326, 20261124) and h[1] == 3, f"{path}: not an fp32 model file"
        return h, np.frombuffer(f.read(), dtype="<f4")


TENSORS = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb", "ln2w", "ln2b", "fcw", "fcb",
           "fcprojw", "fcprojb", "lnfw", "lnfb", "lm_head"]


def tensor_sizes(h):
    """Each tensor's elements (GPT-2's 16; a Llama's, magic 20261124, with no biases and no wpe: 0)."""
    maxT, V, L, NH, C, Vp = h[2:8]
    if h[0] == 20261124:
        NKV, H, hd = h[8], h[9], C // NH
        return [Vp * C, 0, L * C, 0, L * (NH + 2 * NKV) * hd * C, 0, L * C * C, 0, L * C, 0,
                L * 2 * H * C, 0, L * C * H, 0, C, 0, Vp * C if h[11] else 0]  # (h[11]: an untied lm_head)
    return [Vp * C, maxT * C, L * C, L * C, L * 3 * C * C, L * 3 * C, L * C * C, L * C, L * C, L * C,
            L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C, C, C, 0]


def updates(init_path, a_path, b_path, bound):
    hz, z = load(init_path)
    ha, a = load(a_path)
    hb, b = load(b_path)
    if not (hz[:12] == ha[:12] == hb[:12]):
        print(f"not ok - models differ in shape: {hz[:12]}, {ha[:12]}, {hb[:12]}")
        return
    L, C = ha[4], ha[6]
    off, worst, where = 0, 0.0, ""
    for name, n in zip(TENSORS, tensor_sizes(ha)):
        da = a[off:off + n].astype(np.float64) - z[off:off + n]
        db = b[off:off + n].astype(np.float64) - z[off:off + n]
        if n == 0:  # (a Llama's biases, wpe)
            continue
        if name == "qkvb":  # without the key bias (see the header)
            keep = np.ones(n, bool)
            for l in range(L):
                keep[l * 3 * C + C: l * 3 * C + 2 * C] = False
            da, db = da[keep], db[keep]
        rel = np.linalg.norm(da - db) / max(np.linalg.norm(da), 1e-30)
        if rel > worst:
            worst, where = rel, name
        off += n
    print(("ok" if worst <= bound else "not ok") +
          f" - the trainings changed every tensor alike: max ‖dA-dB‖/‖dA‖ {worst:.1e} ({where}) <= {bound:.0e}")


def main():
    if sys.argv[1] == "--updates":
        updates(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]))
        return
    a_path, b_path, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ha, a = load(a_path)
    hb, b = load(b_path)
    if ha[:12] != hb[:12] or a.shape != b.shape:
        print(f"not ok - models differ in shape: {ha[:12]} vs {hb[:12]}")
        return
    maxT, V, L, NH, C, Vp = ha[2:8]
    d = np.abs(a.astype(np.float64) - b)
    if ha[0] == 20240326:  # GPT-2: qkvb is the 6th tensor, after wte, wpe, ln1w, ln1b, qkvw (a Llama has none)
        qkvb = (Vp + maxT) * C + 2 * L * C + L * 3 * C * C
        for l in range(L):
            d[qkvb + l * 3 * C + C: qkvb + l * 3 * C + 2 * C] = 0.0
    worst = d.max()
    print(("ok" if worst <= bound else "not ok") + f" - final parameters agree: max |diff| {worst:.2e} <= {bound:.1e}")


if __name__ == "__main__":
    main()
