"""
compare_models — the largest elementwise difference between two llm.c fp32 model files.

usage: /usr/bin/python3 test/compare_models.py A.bin B.bin BOUND
Prints one "ok"/"not ok" line: max |A − B| ≤ BOUND over every parameter except the key bias
(qkvb[:, C:2C]), whose gradient is zero in exact arithmetic, so that runs differing only in
summation order move it by Adam-normalized round-off noise (see test_vs_pytorch.py).
"""
import struct
import sys

import numpy as np


def load(path):
    with open(path, "rb") as f:
        h = struct.unpack("<256i", f.read(1024))
        assert h[0] == 20240326 and h[1] == 3, f"{path}: not an fp32 model file"
        return h, np.frombuffer(f.read(), dtype="<f4")


def main():
    a_path, b_path, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
    ha, a = load(a_path)
    hb, b = load(b_path)
    if ha[:8] != hb[:8] or a.shape != b.shape:
        print(f"not ok - models differ in shape: {ha[:8]} vs {hb[:8]}")
        return
    maxT, V, L, NH, C, Vp = ha[2:8]
    d = np.abs(a.astype(np.float64) - b)
    # qkvb is the 6th tensor: after wte, wpe, ln1w, ln1b, qkvw
    qkvb = (Vp + maxT) * C + 2 * L * C + L * 3 * C * C
    for l in range(L):
        d[qkvb + l * 3 * C + C: qkvb + l * 3 * C + 2 * C] = 0.0
    worst = d.max()
    print(("ok" if worst <= bound else "not ok") + f" - final parameters agree: max |diff| {worst:.2e} <= {bound:.1e}")


if __name__ == "__main__":
    main()
