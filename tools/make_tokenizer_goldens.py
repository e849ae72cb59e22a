#!/usr/bin/env python3
"""Regenerates tests/fixtures/tokenizer_goldens/goldens.json: token ids of the test strings below for
the fixture tokenizers (byte-level gpt2, llama3, qwen3, deepseek_v3; SentencePiece-style llama2,
gemma3; the Unigram one), computed by the independent Hugging Face implementation in the peer harness
(@huggingface/tokenizers via peer/hf_tokenize.mjs). For the SentencePiece-style and Unigram ones the
reference's decode of those ids is stored too (tools/hf_decode.mjs, the same library): their
decoders do not give back every text (a leading "▁" becomes a space, NFKC, ...). So is DeepSeek's,
whose decode of add_special ids starts with the BOS text.

    python3 tools/make_tokenizer_goldens.py [--peer /work/shared/peer] [--out FILE]

hf_tokenize.mjs reads the text file as UTF-8 (invalid bytes become U+FFFD, the WHATWG way) and
always splits added tokens (parse_special = true). For parse_special = false the script runs it on
a copy of the tokenizer whose *special* added tokens are removed, which is what HF's
encode_special_tokens does (specials are plain text, non-special added tokens still match).

The JS library builds the post-processor from tokenizer.json alone. transformers' Llama and Gemma
fast tokenizers rebuild it from tokenizer_config's add_bos_token / add_eos_token
(update_post_processor), which is what DeepSeek-V3 relies on: its tokenizer.json's post_processor
is ByteLevel only, yet encode("Hello!") gives [0, 19923, 3] in transformers. For add_special the
script therefore hands hf_tokenize.mjs a copy whose post_processor is that rebuilt template
(transformers_template); for llama2 and gemma3 it equals the shipped one.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "tokenizers")
TOKENIZERS = ["gpt2", "llama3", "qwen3", "llama2", "gemma3", "unigram", "deepseek_v3"]
DECODED = ["llama2", "gemma3", "unigram", "deepseek_v3"]  # tokenizers whose decode goldens are stored

# The exact string llama.cpp's convert_hf_to_gguf.py hashes to identify a pre-tokenizer.
CHKTXT = ("\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 "
          "3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
          "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, "
          "'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL")

SPECIALS = ("<|endoftext|>Hello<|im_start|>user\nHi there<|im_end|>\n<|begin_of_text|><|start_header_id|>system"
            "<|end_header_id|>\n\nBe brief.<|eot_id|> <think>\nhmm\n</think>\n<tool_call>{\"a\": 1}</tool_call>")

PYTHON = '''def fib(n: int) -> int:
    """Return the n-th Fibonacci number."""
    if n < 2:
        return n
    a, b = 0, 1
    for _ in range(n - 1):
        a, b = b, a + b  # tuple swap
    return b


class Foo(object):
    def __init__(self):
        self.x = {"key": [1, 2.5, None], 'other': True}
'''

# DeepSeek-V3's own markers (full-width bars, "▁" for spaces): special (BOS/EOS/pad) and not (User,
# Assistant, fim, tool: added tokens that match even when specials are plain text).
DEEPSEEK = ("<｜begin▁of▁sentence｜>You are brief.<｜User｜>你好，1+1=?<｜Assistant｜><think>\n嗯</think>2"
            "<｜end▁of▁sentence｜><｜▁pad▁｜> <｜fim▁begin｜>def f():<｜fim▁hole｜>\n<｜fim▁end｜>"
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get\n<｜tool▁call▁end｜>"
            "<｜begin▁of▁sentence|> <|end▁of▁sentence｜>")

C_CODE = "#include <stdio.h>\n\nint main(int argc, char **argv) {\n\tfor (int i = 0; i < argc; ++i) {\n\t\tprintf(\"%d: %s\\n\", i, argv[i]);\n\t}\n\treturn 0;\t// done\n}\n"


def long_mixed_text(seed=20240601, target=6000):
    """Deterministic several-KB mix of every script and shape the tokenizers care about."""
    rng = random.Random(seed)
    pools = [
        "the of and to in is that it was for on are with as his they be at one have this from or had by".split(),
        "Tokenization BPE merges vocabulary Transformer attention décembre naïve Zürich Ångström".split(),
        ["我", "想在", "工作", "東京", "日本語", "한국어", "текст", "Привет", "مرحبا", "नमस्ते", "ภาษาไทย", "Ελληνικά"],
        ["🚀", "😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "❤️", "😶‍🌫️", "🦙"],
        ["0", "7", "42", "2024", "31415926", "3.14", "1,000", "-17", "0x1F", "1e-9"],
        ["'s", "'t", "'RE", "'ve", "'M", "'ll", "'D", "n't", "I'VE"],
        ["(", ")", "{", "}", "[", "]", ";", ":", "...", "!!", "??", "--", "==", "->", "//", "#", "@", "\"", "`"],
        [" ", "  ", "   ", "\n", "\n\n", "\t", " \n", "\r\n", "\n    "],
        ["def", "return", "if", "else", "int", "printf", "std::vector<int>", "x+=1", "i++"],
    ]
    weights = [30, 8, 6, 3, 6, 3, 8, 14, 5]
    out = []
    size = 0
    while size < target:
        pool = rng.choices(pools, weights)[0]
        piece = rng.choice(pool)
        if pool is not pools[7] and rng.random() < 0.7:
            piece = " " + piece
        out.append(piece)
        size += len(piece.encode("utf-8"))
    return "".join(out)


def cases():
    """(name, text as str or bytes, parse_special, add_special)."""
    c = [
        ("empty", "", True, False),
        ("english", "The quick brown fox jumps over the lazy dog. It's a beautiful day, isn't it? "
                    "Dr. Smith paid $3.50 for 2 coffees at 9:45am.", True, False),
        ("prose_paragraphs", "In the beginning was the Word.\nAnd the Word was with God.\n\n"
                             "Chapter 2\n\nIt was a dark and stormy night; the rain fell in torrents — except at "
                             "occasional intervals, when it was checked by a violent gust of wind.", True, False),
        ("python", PYTHON, True, False),
        ("c_tabs", C_CODE, True, False),
        ("digits", "1 12 123 1234 12345 123456 1234567 3.14159 2024-01-01 0x1F 1,000,000 007 ١٢٣ ४५६ ½ ²", True, False),
        ("long_number", "31415926535897932384626433832795028841971693993751058209749445923078164062862089986280", True, False),
        ("whitespace_runs", "a  b   c    d\n\n\nend  \n\t\tx \t \r\n y\r\n\r\nz   ", True, False),
        ("only_spaces", "     ", True, False),
        ("only_newlines", "\n\n\n", True, False),
        ("crlf", "line1\r\nline2\r\n\r\n", True, False),
        ("leading_trailing", "   leading spaces and trailing   ", True, False),
        ("leading_space", " Hello world", True, False),
        ("leading_space_special", " Hello world", True, True),
        ("contractions", "I'VE I've i'Ve we'Ll WE'LL you'D they'RE it'S don'T I'm I'M 's 'S 'll ''s", True, False),
        ("accented", "Café naïve résumé Ångström Straße façade œuvre Ñandú Łódź São Paulo", True, False),
        ("decomposed", "Cafe\u0301 n\u0303 A\u030a e\u0301te\u0301", True, False),
        ("cjk", "我想在apple工作。東京は日本の首都です。한국어 텍스트입니다。", True, False),
        ("arabic_devanagari", "مرحبا بالعالم، كيف حالك؟ नमस्ते दुनिया, आप कैसे हैं?", True, False),
        ("thai_cyrillic_greek", "ภาษาไทยง่ายนิดเดียว нещо на Български Καλημέρα κόσμε", True, False),
        ("emoji", "🚀 😀😃 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵🇺🇸 ❤️ 😶‍🌫️ ✅🦙🦙", True, False),
        ("unicode_spaces", "a\u00a0b\u3000c\u2003d\u2028e\u202ff", True, False),
        ("controls", "\x00\x01\x07 \x1b[31mred\x1b[0m \x7f end", True, False),
        ("punctuation", "''''''```````\"\"\"\"......!!!!!!?????? ------======= ...!? (a) [b] {c} <d>", True, False),
        ("url_email", "See https://example.com/path/to?q=1&r=two#frag or mail user.name+tag@mail.example.org.", True, False),
        ("markdown_json", "# Title\n\n- item *one*\n- item **two**\n\n```json\n{\"a\": [1, 2, {\"b\": null}]}\n```\n", True, False),
        ("long_word", "a" * 300 + " " + "supercalifragilisticexpialidocious" + " " + "z" * 1000, True, False),
        ("specials_parsed", SPECIALS, True, False),
        ("specials_plain", SPECIALS, False, False),
        ("special_edges", " <|endoftext|> <|endoftext|><|endoftext|>x<|im_start|<|im_end|>>", True, False),
        ("special_edges_plain", " <|endoftext|> <|endoftext|><|endoftext|>x<|im_start|<|im_end|>>", False, False),
        ("add_special", "Hello world", True, True),
        # SentencePiece's own marks written as text: "▁" is a space to the decoder, "<0x41>" is not a byte.
        ("sp_markers", "a\u2581b \u2581\u2581 <0x41> <unk> <s>x</s> <pad> <start_of_turn>user\n", True, False),
        ("sp_markers_plain", "a\u2581b \u2581\u2581 <0x41> <unk> <s>x</s> <pad> <start_of_turn>user\n", False, False),
        ("sp_markers_special", "<s>Hi</s>", True, True),
        ("invalid_utf8", b"abc\xff\xfedef \xc3\x28 \xe2\x82 end \xf0\x9f\x98 \xed\xa0\x80 ok\x80\xc0\xaf", True, False),
        ("invalid_utf8_only", b"\xff", True, False),
        ("chkhsh", CHKTXT, True, False),
        ("chkhsh_add_special", CHKTXT, True, True),
        ("long_mixed", long_mixed_text(), True, False),
        # DeepSeek splits digits in threes and CJK/kana runs out before its word regex: the ranges'
        # edges (U+4E00, U+9FA5 and U+9FA6 past it, hiragana/katakana blocks, the half-width and
        # full-width forms outside them).
        ("cjk_kana_ranges", "一丁\u9fa5\u9fa6\u9fffぁゟ゠ヿｱｲ ＡＢ１２３ 漢字かなカナ混じり文123456文字ab12c3", True, False),
        ("deepseek_specials", DEEPSEEK, True, False),
        ("deepseek_specials_plain", DEEPSEEK, False, False),
        ("deepseek_specials_add", DEEPSEEK, True, True),
    ]
    return c


def materialize(name, tmp):
    """The fixture's folder, or for a gzipped fixture (gemma3) a copy with the files unpacked."""
    src = os.path.join(FIXTURES, name)
    if not os.path.exists(os.path.join(src, "tokenizer.json.gz")):
        return src
    dst = os.path.join(tmp, name)
    os.makedirs(dst)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        with gzip.open(os.path.join(src, f + ".gz"), "rb") as i, open(os.path.join(dst, f), "wb") as o:
            shutil.copyfileobj(i, o)
    return dst


def strip_specials(src_dir, dst_dir):
    with open(os.path.join(src_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tj["added_tokens"] = [t for t in tj.get("added_tokens", []) if not t.get("special")]
    with open(os.path.join(dst_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    shutil.copy(os.path.join(src_dir, "tokenizer_config.json"), dst_dir)


# transformers' tokenizer classes that rebuild the post-processor from add_bos_token/add_eos_token.
REBUILDS_TEMPLATE = {"LlamaTokenizer", "LlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"}


def token_content(t):
    return t.get("content") if isinstance(t, dict) else t


def transformers_template(tj, tc):
    """The post_processor transformers' update_post_processor builds ("<bos>:0 $A:0 <eos>:0" with
    each end present only when add_bos_token / add_eos_token, defaults true / false), or None where
    the tokenizer class keeps the file's."""
    if tc.get("tokenizer_class") not in REBUILDS_TEMPLATE:
        return None
    vocab = tj["model"].get("vocab")
    ids = dict(vocab) if isinstance(vocab, dict) else {}  # the specials-stripped copy keeps them here
    ids.update({a["content"]: a["id"] for a in tj.get("added_tokens", [])})
    bos, eos = token_content(tc.get("bos_token")), token_content(tc.get("eos_token"))
    ends = [t for t, on in ((bos, tc.get("add_bos_token", True)), (eos, tc.get("add_eos_token", False))) if on and t in ids]

    def part(seq, type_id):
        out = [{"SpecialToken": {"id": bos, "type_id": type_id}}] if bos in ends else []
        out.append({"Sequence": {"id": seq, "type_id": type_id}})
        return out + ([{"SpecialToken": {"id": eos, "type_id": type_id}}] if eos in ends else [])

    special = {t: {"id": t, "ids": [ids[t]], "tokens": [t]} for t in ends}
    single, pair = part("A", 0), part("A", 0) + part("B", 1)
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special}


def with_transformers_template(src_dir, dst_dir):
    """A copy of src_dir whose post_processor is transformers' (see the module doc), else src_dir."""
    with open(os.path.join(src_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    with open(os.path.join(src_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        tc = json.load(f)
    pp = transformers_template(tj, tc)
    if pp is None:
        return src_dir
    tj["post_processor"] = pp
    os.makedirs(dst_dir)
    with open(os.path.join(dst_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    shutil.copy(os.path.join(src_dir, "tokenizer_config.json"), dst_dir)
    return dst_dir


def hf_decoded(tok_dir, id_lists, tmp):
    path = os.path.join(tmp, "ids.json")
    with open(path, "w") as f:
        json.dump(id_lists, f)
    cmd = ["node", os.path.join(ROOT, "tools", "hf_decode.mjs"), tok_dir, path]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def hf_ids(peer, tok_dir, data, add_special, tmp):
    path = os.path.join(tmp, "text.txt")
    with open(path, "wb") as f:
        f.write(data)
    cmd = ["node", os.path.join(peer, "hf_tokenize.mjs"), tok_dir, path] + (["--special"] if add_special else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--peer", default="/work/shared/peer")
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "tokenizer_goldens", "goldens.json"))
    args = ap.parse_args()

    out_cases = []
    with tempfile.TemporaryDirectory() as tmp:
        dirs, plain_dirs, template_dirs = {}, {}, {}
        for name in TOKENIZERS:
            dirs[name] = materialize(name, tmp)
            d = os.path.join(tmp, name + "_nospecial")
            os.makedirs(d)
            strip_specials(dirs[name], d)
            plain_dirs[name] = d
            for key, src in (("parsed", dirs[name]), ("plain", d)):
                template_dirs[name, key] = with_transformers_template(src, os.path.join(tmp, f"{name}_{key}_template"))
        for name, text, parse_special, add_special in cases():
            data = text if isinstance(text, bytes) else text.encode("utf-8")
            entry = {"name": name}
            try:
                s = data.decode("utf-8")
                entry["text"] = s
                # decode(encode(x)) == x holds where the tokenizer's normalizer (Qwen: NFC) keeps x.
                entry["nfc"] = unicodedata.is_normalized("NFC", s)
            except UnicodeDecodeError:
                entry["text_hex"] = data.hex()
            entry["parse_special"] = parse_special
            entry["add_special"] = add_special
            entry["ids"] = {}
            for tok in TOKENIZERS:
                d = dirs[tok] if parse_special else plain_dirs[tok]
                if add_special:
                    d = template_dirs[tok, "parsed" if parse_special else "plain"]
                entry["ids"][tok] = hf_ids(args.peer, d, data, add_special, tmp)
            out_cases.append(entry)
            print(f"{name}: " + ", ".join(f"{t} {len(entry['ids'][t])}" for t in TOKENIZERS), file=sys.stderr)
        for tok in DECODED:
            texts = hf_decoded(dirs[tok], [c["ids"][tok] for c in out_cases], tmp)
            for c, text in zip(out_cases, texts):
                c.setdefault("decoded", {})[tok] = text

    doc = {
        "generator": "tools/make_tokenizer_goldens.py: peer/hf_tokenize.mjs (@huggingface/tokenizers 0.2.0)",
        "tokenizers": TOKENIZERS,
        "cases": out_cases,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        # One case per line keeps diffs readable.
        f.write("{\n")
        f.write(f'"generator": {json.dumps(doc["generator"])},\n"tokenizers": {json.dumps(TOKENIZERS)},\n"cases": [\n')
        f.write(",\n".join(json.dumps(c, ensure_ascii=False) for c in out_cases))
        f.write("\n]\n}\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
