"""test_fuzz.py TRAIN_GPT [CASES]: hostile files against the trainer, a few hundred of them.

Each case takes one good file, damages it one way, and runs the trainer on it (the CPU, a tiny
model, one step or one evaluation):
  header    one of the first 16 header fields set to another value (0, -1, 1, huge, +-1, random)
  truncate  the file cut short at a random length
  flip      1 to 4 random bytes XORed with a random non-zero byte
  append    1 to 64 random bytes added at the end
The files: a token shard (--train-data), an llm.c model file without a checksum and one of ours
with its .crc32c (--model), a checkpoint's model.bin, model.bin.crc32c, state file and history
(--resume), and a HellaSwag file (--hellaswag, --steps 0).

Every case must end with exit 0, 1, 2 or 3 (never a signal: no crash, no abort), and a failing run
must print exactly one line on stderr. Where the damage may leave a valid file (a flipped token,
an llm.c model of another head count or vocabulary), the run may succeed, or fail on what the
file now means (a token outside the new vocabulary, named in the data; a NaN weight in an llm.c
file, which has no checksum: the first step's non-finite loss stops the run, exit 3). A damaged checkpoint, a
damaged model file that has a .crc32c, and a file cut short never train (exit 0 fails the case),
and their one line names the damaged file (or its checkpoint's directory). Prints "ok"/"not ok"
lines, then a summary.
"""
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, "test")
import gpt2_torch as ref  # noqa: E402

BIN = sys.argv[1]
CASES = int(sys.argv[2]) if len(sys.argv) > 2 else 320
rng = random.Random(int(os.environ.get("FUZZ_SEED", "20261127")))  # (FUZZ_SEED: other cases)
tmp = tempfile.mkdtemp()
cfg = dict(maxT=32, V=97, Vp=128, L=2, NH=4, C=32)
ref.write_model(f"{tmp}/llmc.bin", cfg, ref.random_params(cfg, seed=3), 3)  # llm.c's kind: no .crc32c
ref.write_shard(f"{tmp}/train.bin", [(i * 7) % 97 for i in range(3000)])
ref.write_eval(f"{tmp}/hs.bin", [(i % 4, [(i + j) % 97 for j in range(6)], [[(i * k + 1) % 97] * (2 + k) for k in range(4)])
                                 for i in range(6)])
base = [BIN, "--device", "cpu", "--val-data", "", "--batch-size", "2", "--seq-len", "16", "--threads", "1"]


def run(args):
    r = subprocess.run(base + args, capture_output=True, text=True, timeout=60)
    return r.returncode, [line for line in r.stderr.splitlines() if line.strip()]


rc, err = run(["--model", f"{tmp}/llmc.bin", "--train-data", f"{tmp}/train.bin", "--steps", "2", "--output-dir", f"{tmp}/ck",
               "--save-model", f"{tmp}/ours.bin"])
if rc != 0:
    print(f"not ok - test_fuzz: the good files do not train (exit {rc}): {err[-1:] if err else ''}")
    sys.exit(1)
CKPT = f"{tmp}/ck/step_00000002"

# (name, file, int32 or int64 header, may succeed when damaged, how to run it on the damaged copy DIR/...)
TARGETS = [
    ("token shard", f"{tmp}/train.bin", 4, True, lambda p: ["--model", f"{tmp}/llmc.bin", "--train-data", p, "--steps", "1"]),
    ("llm.c model file", f"{tmp}/llmc.bin", 4, True, lambda p: ["--model", p, "--train-data", f"{tmp}/train.bin", "--steps", "1"]),
    ("our model file", f"{tmp}/ours.bin", 4, False, lambda p: ["--model", p, "--train-data", f"{tmp}/train.bin", "--steps", "1"]),
    ("our model file's .crc32c", f"{tmp}/ours.bin.crc32c", 0, False,
     lambda p: ["--model", p[:-len(".crc32c")], "--train-data", f"{tmp}/train.bin", "--steps", "1"]),
    ("checkpoint model.bin", f"{CKPT}/model.bin", 4, False, None),
    ("checkpoint model.bin.crc32c", f"{CKPT}/model.bin.crc32c", 0, False, None),
    ("checkpoint state file", f"{CKPT}/state_rank00000.bin", 8, False, None),
    ("checkpoint history.bin", f"{CKPT}/history.bin", 8, False, None),
    ("HellaSwag file", f"{tmp}/hs.bin", 4, True,
     lambda p: ["--model", f"{tmp}/llmc.bin", "--train-data", f"{tmp}/train.bin", "--steps", "0", "--hellaswag", p]),
]
VALUES = [0, -1, 1, 2, 7, 255, 1 << 20, (1 << 31) - 1, -(1 << 31), 1 << 40]


def damage(data, width):
    b = bytearray(data)
    kinds = ["truncate", "flip", "append"] + (["header", "header"] if width else [])
    kind = rng.choice(kinds)
    if kind == "truncate":
        return kind, b[:rng.randrange(len(b))]
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= rng.randint(1, 255)
        return kind, b
    if kind == "append":
        return kind, b + bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    slot = rng.randrange(16)
    fmt = "<i" if width == 4 else "<q"
    old = struct.unpack_from(fmt, b, slot * width)[0]
    lim = (1 << 31) - 1 if width == 4 else (1 << 63) - 1
    new = old
    while new == old:
        new = rng.choice(VALUES + [old + 1, old - 1, rng.randrange(-lim, lim)])
        new = max(-lim - 1, min(lim, new))
    struct.pack_into(fmt, b, slot * width, new)
    return f"header[{slot}] {old} -> {new}", b


passed = failed = 0
for case in range(CASES):
    name, path, width, may_succeed, args_of = TARGETS[case % len(TARGETS)]
    d = f"{tmp}/case"
    shutil.rmtree(d, ignore_errors=True)
    if args_of is None:  # a checkpoint: a copy of its directory, one file damaged, resumed
        shutil.copytree(f"{tmp}/ck", d, ignore=shutil.ignore_patterns(".lock"))
        target = os.path.join(d, "step_00000002", os.path.basename(path))
        args = ["--model", f"{tmp}/llmc.bin", "--train-data", f"{tmp}/train.bin", "--steps", "3", "--output-dir", d, "--resume"]
        named = [target, os.path.dirname(target)]
    else:
        os.makedirs(d)
        target = os.path.join(d, os.path.basename(path))
        for f in (path, path + ".crc32c", path[:-len(".crc32c")] if path.endswith(".crc32c") else None):
            if f and os.path.exists(f) and f != path:
                shutil.copy(f, os.path.join(d, os.path.basename(f)))
        args = args_of(target)
        named = [target, target[:-len(".crc32c")] if target.endswith(".crc32c") else target + ".crc32c"]
    kind, data = damage(open(path, "rb").read(), width)
    open(target, "wb").write(data)
    try:
        rc, err = run(args)
    except subprocess.TimeoutExpired:
        rc, err = -1, ["(timed out after 60 s)"]
    why = ""
    if rc not in (0, 1, 2, 3):
        why = f"exit {rc} (a signal or a crash)"
    elif rc == 0 and (not may_succeed or kind == "truncate"):
        why = "exit 0: trained on a damaged file"
    elif rc != 0 and len(err) != 1:
        why = f"exit {rc} with {len(err)} stderr line(s), not one"
    elif rc != 0 and not may_succeed and not any(n in err[0] for n in named):
        why = f"exit {rc}: its line does not name the damaged file"
    if why:
        failed += 1
        print(f"not ok - fuzz case {case}: {name}, {kind}: {why}")
        for line in err[:3]:
            print(f"#   {line}")
    else:
        passed += 1
print(f"ok - test_fuzz: {passed} of {CASES} damaged files handled (exit 0, 1, 2 or 3; one line naming the file)" if failed == 0 else
      f"not ok - test_fuzz: {failed} of {CASES} damaged files mishandled")
shutil.rmtree(tmp, ignore_errors=True)
sys.exit(1 if failed else 0)
