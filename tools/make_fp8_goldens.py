#!/usr/bin/python3
"""Goldens for kvad's FP8 checkpoints (DeepSeek-V3's float8 e4m3fn weights with 128x128 `weight_scale_inv`
blocks), from references that share no code with kvad's C++:

1. tests/golden/fp8_e4m3.json: the value of each of the 256 e4m3fn bytes, computed here from the bit layout
   with Python floats (1 sign, 4 exponent bits of bias 7, 3 mantissa bits; exponent 0 subnormal; S.1111.111
   NaN and no infinities, so S.1111.110 = 448 is the largest: OCP OFP8 / arXiv:2209.05433, torch.float8_e4m3fn).
   tests/core_fp8.cpp checks kvad's fp8_e4m3_to_f32 against every one.

2. Per block size (128x128: every tiny matrix is one partial block; 16x16: many blocks a matrix, the last
   rows and columns partial where 16 does not divide): `kvad synth` remakes the checkpoint of
   tests/golden/models/tiny-deepseek-v3.json, and every 2-D projection of its layers (attention, dense MLP,
   routed and shared experts; not the router mlp.gate, the norms, the embedding or lm_head, as in
   DeepSeek-V3's own files) is quantised as DeepSeek's inference/kernel.py `weight_quant` does: per block
   s = amax / 448 in f32, w / s in f32 rounded to the nearest e4m3 (ties to even, clamped to +-448), s saved
   as `<name>_scale_inv` (F32, [ceil(rows/b), ceil(cols/b)]). Written:
     tests/fixtures/fp8/tiny-deepseek-v3-b<N>.safetensors: only the F8_E4M3 weights and their scales (the
       test lays them over a fresh synth of the same checkpoint, whose sha256 the golden records);
     tests/golden/models/tiny-deepseek-v3-fp8-b<N>.json: ../shared/peer/ref_forward.py (numpy float64) on a
       dequantised copy, each weight = e4m3 value x scale (exact in float64, rounded once to f32: the
       value kvad's f32 dequantisation must produce bit for bit, recorded as sha256 per tensor), in
       tools/make_model_goldens.py's layout, with the config.json keys the FP8 copy adds ("config_set").

  /usr/bin/python3 tools/make_fp8_goldens.py [--kvad build/kvad] [--peer ../shared/peer]
"""
import argparse
import hashlib
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from golden_synth import synth  # noqa: E402
from make_model_goldens import PROMPT, ref_logits, reference_fields  # noqa: E402

BASE_GOLDEN = "tests/golden/models/tiny-deepseek-v3.json"
BLOCKS = (128, 16)
FP8_MAX = 448.0


def e4m3_value(code):
    """The value of one e4m3fn byte from its bits, or None for NaN."""
    sign = -1.0 if code & 0x80 else 1.0
    exp, mant = (code >> 3) & 0xF, code & 0x7
    if exp == 0xF and mant == 0x7:
        return None
    if exp == 0:
        return sign * math.ldexp(mant / 8.0, -6)
    return sign * math.ldexp(1.0 + mant / 8.0, exp - 7)


def write_table(path):
    values = [e4m3_value(c) for c in range(256)]
    # Anchors the format is known by, so a slip in the formula above cannot pass unnoticed.
    assert values[0x7E] == 448.0 and values[0xFE] == -448.0 and values[0x01] == 2.0 ** -9
    assert values[0x08] == 2.0 ** -6 and values[0x38] == 1.0 and values[0x7F] is None and values[0xFF] is None
    assert math.copysign(1.0, values[0x80]) == -1.0
    with open(path, "w") as f:
        json.dump({"about": "e4m3fn value of each byte 0..255 (null: NaN), from the bit layout in Python floats "
                            "by tools/make_fp8_goldens.py", "values": values}, f)


POSITIVE = np.array([e4m3_value(c) for c in range(0x7F)])  # codes 0x00..0x7e, increasing


def encode_e4m3(y):
    """float values (f32 held in float64) -> e4m3fn codes: nearest, ties to the even code, clamped to +-448."""
    a = np.minimum(np.abs(y), FP8_MAX)
    hi = np.clip(np.searchsorted(POSITIVE, a, side="left"), 1, len(POSITIVE) - 1)
    lo = hi - 1
    d_lo, d_hi = a - POSITIVE[lo], POSITIVE[hi] - a
    code = np.where(d_hi < d_lo, hi, lo)
    code = np.where(d_hi == d_lo, np.where(lo % 2 == 0, lo, hi), code)
    code = np.where(a == 0, 0, code)
    return (code | np.where(np.signbit(y), 0x80, 0)).astype(np.uint8)


def quantize(w, b):
    """DeepSeek's weight_quant on an f32 matrix: (codes, f32 scales [ceil(r/b), ceil(c/b)])."""
    rows, cols = w.shape
    scales = np.zeros(((rows + b - 1) // b, (cols + b - 1) // b), dtype=np.float32)
    codes = np.zeros(w.shape, dtype=np.uint8)
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            blk = w[i * b:(i + 1) * b, j * b:(j + 1) * b]
            s = np.float32(np.abs(blk).max()) / np.float32(FP8_MAX)  # f32 arithmetic, as the Triton kernel
            s = s if s > 0 else np.float32(1)
            scales[i, j] = s
            codes[i * b:(i + 1) * b, j * b:(j + 1) * b] = encode_e4m3((blk / s).astype(np.float32).astype(np.float64))
    return codes, scales


def dequantize(codes, scales, b):
    """e4m3 value x scale in float64 (exact: 4 x 24 significant bits), rounded once to f32."""
    table = np.array([e4m3_value(c) if c != 0x7F and c != 0xFF else np.nan for c in range(256)])
    s = np.repeat(np.repeat(scales.astype(np.float64), b, axis=0), b, axis=1)[:codes.shape[0], :codes.shape[1]]
    return (table[codes] * s).astype(np.float32)


def read_safetensors(path):
    """name -> (dtype, shape, raw bytes), in file order."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    return {k: (e["dtype"], e["shape"], data[base + e["data_offsets"][0]:base + e["data_offsets"][1]])
            for k, e in sorted(header.items(), key=lambda kv: kv[1].get("data_offsets", [0])[0])
            if k != "__metadata__"}


def write_safetensors(path, tensors):
    header, off = {}, 0
    for k, (dt, shape, raw) in tensors.items():
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    hs = json.dumps(header).encode()
    hs += b" " * (-len(hs) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hs)) + hs)
        for _, _, raw in tensors.values():
            f.write(raw)


def to_f32(dt, shape, raw):
    if dt == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    assert dt == "F32", dt
    return np.frombuffer(raw, "<f4").reshape(shape)


def is_projection(name, shape):
    return name.startswith("model.layers.") and name.endswith("_proj.weight") and len(shape) == 2


def make_variant(a, synth_opts, block, work, out_golden, out_fixture):
    md = os.path.join(work, f"synth-{block}")
    sha = synth(a.kvad, synth_opts["arch"], synth_opts, md)
    assert sha == synth_opts["sha256"], "kvad synth no longer makes the checkpoint of " + BASE_GOLDEN
    tensors = read_safetensors(os.path.join(md, "model.safetensors"))
    fp8, deq, deq_sha = {}, dict(tensors), {}
    for name, (dt, shape, raw) in tensors.items():
        if not is_projection(name, shape):
            continue
        codes, scales = quantize(to_f32(dt, shape, raw), block)
        fp8[name] = ("F8_E4M3", shape, codes.tobytes())
        fp8[name + "_scale_inv"] = ("F32", list(scales.shape), scales.astype("<f4").tobytes())
        d = dequantize(codes, scales, block).astype("<f4").tobytes()
        deq[name] = ("F32", shape, d)
        deq_sha[name] = hashlib.sha256(d).hexdigest()
    write_safetensors(out_fixture, fp8)
    write_safetensors(os.path.join(md, "model.safetensors"), deq)  # the reference's dequantised copy
    logits = ref_logits(a.peer, md, PROMPT, work)
    config_set = {"quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                          "weight_block_size": [block, block]}}
    g = {
        "about": "made by tools/make_fp8_goldens.py: ../shared/peer/ref_forward.py (numpy float64) on the "
                 "dequantised FP8 checkpoint",
        "synth": synth_opts,
        "config_set": config_set,
        "fp8": {"fixture": os.path.relpath(out_fixture, ROOT),
                "fixture_sha256": hashlib.sha256(open(out_fixture, "rb").read()).hexdigest(),
                "dequantised_sha256": deq_sha},
        "prompt": PROMPT,
        "vocab": int(logits.shape[1]),
        **reference_fields(logits),
    }
    with open(out_golden, "w") as f:
        json.dump(g, f)
    print(f"block {block}: {len(deq_sha)} FP8 matrices, fixture {os.path.getsize(out_fixture)} bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kvad", default=os.path.join(ROOT, "build", "kvad"))
    ap.add_argument("--peer", default=os.path.join(os.path.dirname(ROOT), "shared", "peer"))
    a = ap.parse_args()
    write_table(os.path.join(ROOT, "tests", "golden", "fp8_e4m3.json"))
    synth_opts = json.load(open(os.path.join(ROOT, BASE_GOLDEN)))["synth"]
    os.makedirs(os.path.join(ROOT, "tests", "fixtures", "fp8"), exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for block in BLOCKS:
            name = f"tiny-deepseek-v3-fp8-b{block}"
            make_variant(a, synth_opts, block, work, os.path.join(ROOT, "tests", "golden", "models", name + ".json"),
                         os.path.join(ROOT, "tests", "fixtures", "fp8", f"tiny-deepseek-v3-b{block}.safetensors"))


if __name__ == "__main__":
    main()
