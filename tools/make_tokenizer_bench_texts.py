#!/usr/bin/env python3
"""Writes the 1 MB texts the tokenizer throughput figures in docs/tokenizer.md were measured on:

    python3 tools/make_tokenizer_bench_texts.py /tmp
    KVAD_BENCH_TEXT=/tmp/mixed_1mb.txt build/test_tokenizer_throughput

mixed_1mb.txt: the goldens' mix of scripts, emoji, digits, code and whitespace (make_tokenizer_goldens'
long_mixed_text) at 1 MB; cjk_1mb.txt: runs of 8-40 random CJK ideographs (U+4E00-U+4FFF) between
punctuation, no spaces at all, so SentencePiece-style tokenizers see long words and byte fallback.
The English figures use the test's own generator (KVAD_BENCH_BYTES=1000000).
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_tokenizer_goldens import long_mixed_text  # noqa: E402


def cjk_text(target, seed=3):
    rng = random.Random(seed)
    out, size = [], 0
    while size < target:
        run = "".join(chr(rng.randint(0x4E00, 0x4FFF)) for _ in range(rng.randint(8, 40)))
        run += rng.choice(["。", "，", "！", "\n"])
        out.append(run)
        size += len(run.encode("utf-8"))
    return "".join(out)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    with open(os.path.join(out, "mixed_1mb.txt"), "w", encoding="utf-8") as f:
        f.write(long_mixed_text(seed=7, target=1_000_000))
    with open(os.path.join(out, "cjk_1mb.txt"), "w", encoding="utf-8") as f:
        f.write(cjk_text(1_000_000))


if __name__ == "__main__":
    main()
