#!/usr/bin/python3
"""Seed corpus for fuzz/fuzz_gguf.cpp: small GGUF files that load (tiny llama / gpt2 / qwen3 models
with a tokenizer, in F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K) so the fuzzer starts
from deep inside the reader and the loaders, plus a few that fail late. Deterministic; standard
library only.

  /usr/bin/python3 tools/make_gguf_fuzz_seeds.py [OUT_DIR]   (default fuzz/corpus/gguf)
"""
import os
import random
import struct
import sys

U32, I32, F32, BOOL, STR, ARR = 4, 5, 6, 7, 8, 9
TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22),
         "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
         "Q6_K": (14, 256, 210)}


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


class Writer:
    def __init__(self):
        self.kv, self.tensors = [], []

    def add(self, key, t, v):
        if t == STR:
            body = s(v)
        elif t == U32:
            body = struct.pack("<I", v)
        elif t == F32:
            body = struct.pack("<f", v)
        elif t == BOOL:
            body = bytes([1 if v else 0])
        elif t == (ARR, STR):
            body = struct.pack("<IQ", STR, len(v)) + b"".join(s(x) for x in v)
            t = ARR
        elif t == (ARR, I32):
            body = struct.pack("<IQ", I32, len(v)) + b"".join(struct.pack("<i", x) for x in v)
            t = ARR
        self.kv.append(s(key) + struct.pack("<I", t) + body)

    def tensor(self, name, ne, gtype, rng, positive=False):
        if ne[0] % TYPES[gtype][1]:
            gtype = "F32"  # rows that are not whole blocks stay F32 (as the converter falls back)
        tid, blk, bb = TYPES[gtype]
        n = 1
        for d in ne:
            n *= d
        if gtype == "F32":
            data = b"".join(struct.pack("<f", abs(rng.gauss(0, 0.5)) + 1 if positive else rng.gauss(0, 0.5))
                            for _ in range(n))
        else:
            data = bytearray(rng.getrandbits(8) for _ in range(n // blk * bb))
            # keep f16 scales small and finite: 0x2000..0x27ff is about 0.008..0.03
            offs = {"F16": [], "Q6_K": [208]}.get(gtype, [0, 2] if gtype in ("Q4_K", "Q5_K", "Q4_1", "Q5_1") else [0])
            if gtype == "F16":
                for i in range(0, len(data), 2):
                    data[i + 1] = 0x30 | (data[i + 1] & 0x07)
            for b0 in range(0, len(data), bb):
                for o in offs:
                    data[b0 + o + 1] = 0x20 | (data[b0 + o + 1] & 0x07)
            data = bytes(data)
        self.tensors.append((name, ne, tid, data))

    def bytes(self):
        out = struct.pack("<IIQQ", 0x46554747, 3, len(self.tensors), len(self.kv)) + b"".join(self.kv)
        off = 0
        for name, ne, tid, data in self.tensors:
            out += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<q", d) for d in ne)
            out += struct.pack("<IQ", tid, off)
            off += (len(data) + 31) // 32 * 32
        out += b"\0" * ((-len(out)) % 32)
        for _, _, _, data in self.tensors:
            out += data + b"\0" * ((-len(data)) % 32)
        return out


def tokenizer(w, pre):
    toks = [chr(c) for c in range(ord("a"), ord("a") + 6)] + ["ab", "<|endoftext|>"]
    w.add("tokenizer.ggml.model", STR, "gpt2")
    w.add("tokenizer.ggml.pre", STR, pre)
    w.add("tokenizer.ggml.tokens", (ARR, STR), toks)
    w.add("tokenizer.ggml.token_type", (ARR, I32), [1] * 7 + [3])
    w.add("tokenizer.ggml.merges", (ARR, STR), ["a b"])
    w.add("tokenizer.ggml.eos_token_id", U32, 7)
    w.add("tokenizer.chat_template", STR, "{% for m in messages %}{{ m['content'] }}{% endfor %}")


def llama_like(arch, H, I, wtype, rng, pre="llama-bpe", rope_freqs=False, tied=False, hd=None):
    w = Writer()
    nh, nkv = 2, 1
    hd = hd or H // 2
    w.add("general.architecture", STR, arch)
    if hd != H // 2:
        w.add(f"{arch}.attention.key_length", U32, hd)
        w.add(f"{arch}.attention.value_length", U32, hd)
    for k, v in (("block_count", 1), ("context_length", 64), ("embedding_length", H), ("feed_forward_length", I),
                 ("attention.head_count", nh), ("attention.head_count_kv", nkv)):
        w.add(f"{arch}.{k}", U32, v)
    w.add(f"{arch}.attention.layer_norm_rms_epsilon", F32, 1e-5)
    w.add(f"{arch}.rope.freq_base", F32, 10000.0)
    tokenizer(w, pre)
    V = 8
    w.tensor("token_embd.weight", [H, V], wtype, rng)
    if not tied:
        w.tensor("output.weight", [H, V], wtype, rng)
    w.tensor("output_norm.weight", [H], "F32", rng)
    if rope_freqs:
        w.tensor("rope_freqs.weight", [hd // 2], "F32", rng, positive=True)
    p = "blk.0."
    w.tensor(p + "attn_norm.weight", [H], "F32", rng)
    w.tensor(p + "attn_q.weight", [H, nh * hd], wtype, rng)
    w.tensor(p + "attn_k.weight", [H, nkv * hd], wtype, rng)
    w.tensor(p + "attn_v.weight", [H, nkv * hd], wtype, rng)
    w.tensor(p + "attn_output.weight", [nh * hd, H], wtype, rng)
    if arch == "qwen2":
        for t, r in (("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd)):
            w.tensor(p + f"attn_{t}.bias", [r], "F32", rng)
    if arch == "qwen3":
        w.tensor(p + "attn_q_norm.weight", [hd], "F32", rng)
        w.tensor(p + "attn_k_norm.weight", [hd], "F32", rng)
    w.tensor(p + "ffn_norm.weight", [H], "F32", rng)
    w.tensor(p + "ffn_gate.weight", [H, I], wtype, rng)
    w.tensor(p + "ffn_up.weight", [H, I], wtype, rng)
    w.tensor(p + "ffn_down.weight", [I, H], wtype, rng)
    return w.bytes()


def gpt2(E, wtype, rng, F=None):
    w = Writer()
    w.add("general.architecture", STR, "gpt2")
    F = F or 4 * E
    for k, v in (("block_count", 1), ("context_length", 16), ("embedding_length", E), ("feed_forward_length", F),
                 ("attention.head_count", 2)):
        w.add(f"gpt2.{k}", U32, v)
    w.add("gpt2.attention.layer_norm_epsilon", F32, 1e-5)
    tokenizer(w, "gpt-2")
    w.tensor("token_embd.weight", [E, 8], wtype, rng)
    w.tensor("position_embd.weight", [E, 16], "F32", rng)
    w.tensor("output_norm.weight", [E], "F32", rng)
    w.tensor("output_norm.bias", [E], "F32", rng)
    p = "blk.0."
    for n in ("attn_norm", "ffn_norm"):
        w.tensor(p + n + ".weight", [E], "F32", rng)
        w.tensor(p + n + ".bias", [E], "F32", rng)
    for n, i, o in (("attn_qkv", E, 3 * E), ("attn_output", E, E), ("ffn_up", E, F), ("ffn_down", F, E)):
        w.tensor(p + n + ".weight", [i, o], wtype, rng)
        w.tensor(p + n + ".bias", [o], "F32", rng)
    return w.bytes()


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                             "fuzz", "corpus", "gguf")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(1)
    seeds = {
        "llama_f32.gguf": llama_like("llama", 32, 64, "F32", rng, rope_freqs=True),
        "llama_q8_0.gguf": llama_like("llama", 32, 64, "Q8_0", rng),
        "qwen2_q4_0.gguf": llama_like("qwen2", 32, 64, "Q4_0", rng, pre="qwen2", tied=True),
        "qwen3_q4_1.gguf": llama_like("qwen3", 32, 64, "Q4_1", rng, pre="qwen2"),
        "llama_q5_0.gguf": llama_like("llama", 32, 32, "Q5_0", rng, pre="smollm"),
        "llama_q5_1.gguf": llama_like("llama", 32, 32, "Q5_1", rng, pre="gpt-2"),
        "gpt2_f16.gguf": gpt2(32, "F16", rng),
        # 256 wide (K-quant rows) but few rows: head size 4, 8 hidden MLP units, 8 tokens.
        "qwen2_q4_k.gguf": llama_like("qwen2", 256, 8, "Q4_K", rng, pre="qwen2", tied=True, hd=4),
        "llama_q5_k.gguf": llama_like("llama", 256, 8, "Q5_K", rng, hd=4, rope_freqs=True),
        "qwen3_q6_k.gguf": llama_like("qwen3", 256, 8, "Q6_K", rng, pre="qwen2", hd=4),
    }
    w = Writer()  # K-quant tensors on their own (the model would be too big for a seed)
    w.add("general.architecture", STR, "llama")
    for t in ("Q4_K", "Q5_K", "Q6_K"):
        w.tensor(f"blk.0.{t}.weight", [256, 2], t, rng)
    seeds["kquant_tensors.gguf"] = w.bytes()
    for name, b in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b)
        print(name, len(b))


if __name__ == "__main__":
    main()
