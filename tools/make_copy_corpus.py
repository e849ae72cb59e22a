#!/usr/bin/env python3
"""A copy-task corpus for speculative decoding's benchmark (docs/speculative.md): each example is a
line of 30-110 random words, then the same line again. Random words leave nothing to memorise, so
a model trained on it (kvad train) learns to copy its input: the input-grounded task prompt
lookup drafts for.

    python3 tools/make_copy_corpus.py corpus.txt      # 4 M characters
    python3 tools/make_copy_corpus.py --line line.txt # one new line to repeat: the benchmark prompt
    python3 tools/make_copy_corpus.py --line l11.txt 11 --length 100   # other passages (seed, length)
"""
import random
import re
import sys

words = sorted({w for w in re.findall(r"[a-z]+", open("/usr/share/common-licenses/GPL-3").read().lower())
                if 2 <= len(w) <= 10})


def line(rng, length):
    s = ""
    while len(s) < length:
        s += rng.choice(words) + " "
    return s.strip()


if sys.argv[1] == "--line":
    seed = int(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3].isdigit() else 1234
    length = int(sys.argv[sys.argv.index("--length") + 1]) if "--length" in sys.argv else 105
    open(sys.argv[2], "w").write("\n\n" + line(random.Random(seed), length) + "\n")
else:
    rng, out, n = random.Random(2), [], 0
    while n < 4_000_000:
        s = line(rng, rng.randint(30, 110))
        out.append(s + "\n" + s + "\n\n")
        n += 2 * len(s) + 3
    open(sys.argv[1], "w").write("".join(out))
