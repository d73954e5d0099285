"""make_choice_set.py OUT [SHARD]: a small multiple-choice eval file (llm.c's hellaswag_val.bin
format, test/gpt2_torch.py: write_eval) from a validation shard (default the shipped one; or its
small-vocabulary fold, test/small_vocab.py), for the tests of --hellaswag (test_dp.sh,
test_pp.sh, test_cp.sh): 10 examples, each a context of 8 tokens, its true continuation of 5 and
three continuations taken from elsewhere (2-6 tokens), the label at a random place. Always the
same file (seeded)."""
import random
import sys

sys.path.insert(0, "test")
import gpt2_torch as ref  # noqa: E402

shard = sys.argv[2] if len(sys.argv) > 2 else "data/kjv_val_000000.bin"
toks = ref.read_shard(shard).tolist()
rng = random.Random(5)
examples = []
for _ in range(10):
    at = [rng.randrange(len(toks) - 20) for _ in range(4)]
    endings = [toks[at[0] + 8:at[0] + 13]] + [toks[a:a + rng.randint(2, 6)] for a in at[1:]]
    label = rng.randrange(4)
    endings[0], endings[label] = endings[label], endings[0]
    examples.append((label, toks[at[0]:at[0] + 8], endings))
ref.write_eval(sys.argv[1], examples)
