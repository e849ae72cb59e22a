#!/usr/bin/python3
"""Builds tests/fixtures/tokenizers/unigram/: a small SentencePiece Unigram tokenizer in the layout
Hugging Face gives T5 (model type Unigram with scores, WhitespaceSplit + Metaspace pre-tokenizer,
Metaspace decoder, </s> appended by the post-processor).

No Unigram tokenizer.json is on npm, so the vocabulary is trained here with Debian's SentencePiece
(apt-get install sentencepiece python3-sentencepiece) on kvad's own docs plus a few lines of other
scripts; the pieces and scores are SentencePiece's, the JSON layout is transformers' SpmConverter's.
One difference from T5: T5's normalizer is "Precompiled" (a SentencePiece character map that kvad
does not read); this fixture trains with the identity rule and puts NFKC in its place.

    /usr/bin/python3 tools/make_unigram_fixture.py

Golden ids for it come from the HF reference like every other fixture (tools/make_tokenizer_goldens.py).
"""
import glob
import json
import os
import subprocess
import tempfile

import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "unigram")
VOCAB_SIZE = 2000

EXTRA_LINES = [
    "Café naïve résumé Ångström Straße façade œuvre Ñandú Łódź São Paulo",
    "我想在apple工作。東京は日本の首都です。한국어 텍스트입니다。",
    "нещо на Български Καλημέρα κόσμε Привет текст",
    "1 12 123 1234 12345 3.14159 2024-01-01 0x1F 1,000,000",
]


def corpus(path):
    with open(path, "w", encoding="utf-8") as out:
        for md in sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))) + [os.path.join(ROOT, "README.md")]:
            with open(md, encoding="utf-8") as f:
                out.write(f.read())
        out.write("\n".join(EXTRA_LINES * 20) + "\n")


def train(tmp):
    text = os.path.join(tmp, "corpus.txt")
    corpus(text)
    prefix = os.path.join(tmp, "m")
    subprocess.run(["spm_train", f"--input={text}", f"--model_prefix={prefix}", "--model_type=unigram",
                    f"--vocab_size={VOCAB_SIZE}", "--character_coverage=0.995", "--normalization_rule_name=identity",
                    "--pad_id=0", "--eos_id=1", "--unk_id=2", "--bos_id=-1", "--num_threads=1",
                    "--max_sentence_length=100000", "--minloglevel=2"], check=True)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def added(i, content):
    return {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def tokenizer_json(sp):
    vocab = [[sp.id_to_piece(i), 0.0 if sp.is_control(i) or sp.is_unknown(i) else sp.get_score(i)]
             for i in range(sp.get_piece_size())]
    metaspace = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<pad>"), added(1, "</s>"), added(2, "<unk>")],
        # SpmConverter: the model's normalizer, then right-strip and runs of spaces as one metaspace.
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"},
            {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": "\u2581"}]},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
            "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
        "decoder": metaspace,
        "model": {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": False},
    }


def main():
    with tempfile.TemporaryDirectory() as tmp:
        sp = train(tmp)
        os.makedirs(OUT, exist_ok=True)
        with open(os.path.join(OUT, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tokenizer_json(sp), f, ensure_ascii=False, indent=1)
    config = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>", "tokenizer_class": "T5Tokenizer",
              "model_max_length": 512, "clean_up_tokenization_spaces": False}
    with open(os.path.join(OUT, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(OUT, "SOURCE"), "w", encoding="utf-8") as f:
        f.write("built by tools/make_unigram_fixture.py (Debian sentencepiece 0.1.97, unigram, vocab "
                f"{VOCAB_SIZE}, trained on kvad's docs); T5's tokenizer.json layout with NFKC for Precompiled\n")


if __name__ == "__main__":
    main()
