#!/usr/bin/env python3
"""Writes a diffusers unet (or vae) folder (config.json + diffusion_pytorch_model.safetensors) with
random float32 weights in the real layout, for timing kvad's UNet and VAE at real sizes without a
download.

    python3 scripts/unet_random_weights.py --preset sd15 --out /tmp/sd15-unet
    python3 scripts/unet_random_weights.py --part vae --preset sd15 --out /tmp/sd15-vae
    python3 scripts/unet_random_weights.py --config path/to/unet/config.json --out DIR

Names and shapes follow diffusers 0.25.1's UNet2DConditionModel for the configs kvad runs
(CrossAttn/Down/Up blocks, UNetMidBlock2DCrossAttn, optional text_time added embedding).
Only numpy is needed. Weights N(0, 1/fan_in), biases and norms small: the values do not matter
for speed, only that they stay finite.
"""
import argparse
import json
import os
import struct

import numpy as np

SD15 = {
    "_class_name": "UNet2DConditionModel", "act_fn": "silu", "attention_head_dim": 8,
    "block_out_channels": [320, 640, 1280, 1280], "center_input_sample": False, "cross_attention_dim": 768,
    "down_block_types": ["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
    "downsample_padding": 1, "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 4, "layers_per_block": 2,
    "mid_block_scale_factor": 1, "norm_eps": 1e-05, "norm_num_groups": 32, "out_channels": 4, "sample_size": 64,
    "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"],
}
SDXL = {
    "_class_name": "UNet2DConditionModel", "act_fn": "silu", "addition_embed_type": "text_time",
    "addition_time_embed_dim": 256, "attention_head_dim": [5, 10, 20], "block_out_channels": [320, 640, 1280],
    "cross_attention_dim": 2048,
    "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
    "flip_sin_to_cos": True, "freq_shift": 0, "in_channels": 4, "layers_per_block": 2, "norm_num_groups": 32,
    "out_channels": 4, "projection_class_embeddings_input_dim": 2816, "sample_size": 128,
    "transformer_layers_per_block": [1, 2, 10],
    "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"], "use_linear_projection": True,
}


VAE = {
    "_class_name": "AutoencoderKL", "act_fn": "silu", "block_out_channels": [128, 256, 512, 512],
    "down_block_types": ["DownEncoderBlock2D"] * 4, "in_channels": 3, "latent_channels": 4, "layers_per_block": 2,
    "norm_num_groups": 32, "out_channels": 3, "sample_size": 512, "scaling_factor": 0.18215,
    "up_block_types": ["UpDecoderBlock2D"] * 4,
}
VAE_SDXL = dict(VAE, sample_size=1024, scaling_factor=0.13025, force_upcast=True)


def per_level(v, n):
    return list(v) if isinstance(v, list) else [v] * n


def tensors(c):
    """(name, shape) of every parameter, in module order."""
    boc = c["block_out_channels"]
    L, c0, E = len(boc), boc[0], 4 * boc[0]
    heads = per_level(c.get("attention_head_dim", 8), L)
    tl = per_level(c.get("transformer_layers_per_block", 1), L)
    X, lpb, lin = c["cross_attention_dim"], c.get("layers_per_block", 2), c.get("use_linear_projection", False)
    out = []

    def lin_(n, o, i, bias=True):
        out.append((n + ".weight", [o, i]))
        if bias:
            out.append((n + ".bias", [o]))

    def conv(n, o, i, k):
        out.append((n + ".weight", [o, i, k, k]))
        out.append((n + ".bias", [o]))

    def norm(n, ch):
        out.append((n + ".weight", [ch]))
        out.append((n + ".bias", [ch]))

    def resnet(p, i, o):
        norm(p + "norm1", i)
        conv(p + "conv1", o, i, 3)
        lin_(p + "time_emb_proj", o, E)
        norm(p + "norm2", o)
        conv(p + "conv2", o, o, 3)
        if i != o:
            conv(p + "conv_shortcut", o, i, 1)

    def transformer(p, ch, layers):
        norm(p + "norm", ch)
        (lin_ if lin else lambda n, o, i: conv(n, o, i, 1))(p + "proj_in", ch, ch)
        for k in range(layers):
            q = f"{p}transformer_blocks.{k}."
            norm(q + "norm1", ch)
            for a, kv in (("attn1", ch), ("attn2", X)):
                if a == "attn2":
                    norm(q + "norm2", ch)
                lin_(q + a + ".to_q", ch, ch, False)
                lin_(q + a + ".to_k", ch, kv, False)
                lin_(q + a + ".to_v", ch, kv, False)
                lin_(q + a + ".to_out.0", ch, ch)
            norm(q + "norm3", ch)
            lin_(q + "ff.net.0.proj", 8 * ch, ch)
            lin_(q + "ff.net.2", ch, 4 * ch)
        (lin_ if lin else lambda n, o, i: conv(n, o, i, 1))(p + "proj_out", ch, ch)

    lin_("time_embedding.linear_1", E, c0)
    lin_("time_embedding.linear_2", E, E)
    if c.get("addition_embed_type") == "text_time":
        lin_("add_embedding.linear_1", E, c["projection_class_embeddings_input_dim"])
        lin_("add_embedding.linear_2", E, E)
    conv("conv_in", c0, c["in_channels"], 3)
    prev = c0
    for i, t in enumerate(c["down_block_types"]):
        for j in range(lpb):
            resnet(f"down_blocks.{i}.resnets.{j}.", prev if j == 0 else boc[i], boc[i])
            if t == "CrossAttnDownBlock2D":
                transformer(f"down_blocks.{i}.attentions.{j}.", boc[i], tl[i])
        if i < L - 1:
            conv(f"down_blocks.{i}.downsamplers.0.conv", boc[i], boc[i], 3)
        prev = boc[i]
    resnet("mid_block.resnets.0.", boc[-1], boc[-1])
    transformer("mid_block.attentions.0.", boc[-1], tl[-1])
    resnet("mid_block.resnets.1.", boc[-1], boc[-1])
    prev = boc[-1]
    for i, t in enumerate(c["up_block_types"]):
        lvl = L - 1 - i
        o, inp = boc[lvl], boc[max(lvl - 1, 0)]
        for j in range(lpb + 1):
            skip = inp if j == lpb else o
            resnet(f"up_blocks.{i}.resnets.{j}.", (prev if j == 0 else o) + skip, o)
            if t == "CrossAttnUpBlock2D":
                transformer(f"up_blocks.{i}.attentions.{j}.", o, tl[lvl])
        if i < L - 1:
            conv(f"up_blocks.{i}.upsamplers.0.conv", o, o, 3)
        prev = o
    norm("conv_norm_out", c0)
    conv("conv_out", c["out_channels"], c0, 3)
    return out


def vae_tensors(c):
    """(name, shape) of every AutoencoderKL parameter (diffusers 0.25.1 names), in module order."""
    boc, lpb, L = c["block_out_channels"], c.get("layers_per_block", 2), c["latent_channels"]
    out = []

    def conv(n, o, i, k):
        out.extend([(n + ".weight", [o, i, k, k]), (n + ".bias", [o])])

    def norm(n, ch):
        out.extend([(n + ".weight", [ch]), (n + ".bias", [ch])])

    def resnet(p, i, o):
        norm(p + "norm1", i)
        conv(p + "conv1", o, i, 3)
        norm(p + "norm2", o)
        conv(p + "conv2", o, o, 3)
        if i != o:
            conv(p + "conv_shortcut", o, i, 1)

    def mid(p, ch):
        resnet(p + "resnets.0.", ch, ch)
        norm(p + "attentions.0.group_norm", ch)
        for n in ("to_q", "to_k", "to_v", "to_out.0"):
            out.extend([(p + "attentions.0." + n + ".weight", [ch, ch]), (p + "attentions.0." + n + ".bias", [ch])])
        resnet(p + "resnets.1.", ch, ch)

    conv("encoder.conv_in", boc[0], c["in_channels"], 3)
    prev = boc[0]
    for i, ch in enumerate(boc):
        for j in range(lpb):
            resnet(f"encoder.down_blocks.{i}.resnets.{j}.", prev if j == 0 else ch, ch)
        if i < len(boc) - 1:
            conv(f"encoder.down_blocks.{i}.downsamplers.0.conv", ch, ch, 3)
        prev = ch
    mid("encoder.mid_block.", boc[-1])
    norm("encoder.conv_norm_out", boc[-1])
    conv("encoder.conv_out", 2 * L, boc[-1], 3)
    conv("quant_conv", 2 * L, 2 * L, 1)
    conv("post_quant_conv", L, L, 1)
    conv("decoder.conv_in", boc[-1], L, 3)
    mid("decoder.mid_block.", boc[-1])
    rev = list(reversed(boc))
    prev = rev[0]
    for i, ch in enumerate(rev):
        for j in range(lpb + 1):
            resnet(f"decoder.up_blocks.{i}.resnets.{j}.", prev if j == 0 else ch, ch)
        if i < len(boc) - 1:
            conv(f"decoder.up_blocks.{i}.upsamplers.0.conv", ch, ch, 3)
        prev = ch
    norm("decoder.conv_norm_out", boc[0])
    conv("decoder.conv_out", c["out_channels"], boc[0], 3)
    return out


def write(c, out_dir, seed):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    rng = np.random.default_rng(seed)
    ts = vae_tensors(c) if c["_class_name"] == "AutoencoderKL" else tensors(c)
    header, off = {}, 0
    for n, s in ts:
        nb = 4 * int(np.prod(s))
        header[n] = {"dtype": "F32", "shape": s, "data_offsets": [off, off + nb]}
        off += nb
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(out_dir, "diffusion_pytorch_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for n, s in ts:
            if n.endswith(".weight") and len(s) >= 2:
                fan_in = int(np.prod(s[1:]))
                a = rng.standard_normal(s, dtype=np.float32) * np.float32(1 / np.sqrt(fan_in))
            elif n.endswith(".weight"):
                a = 1 + 0.1 * rng.standard_normal(s, dtype=np.float32)
            else:
                a = 0.05 * rng.standard_normal(s, dtype=np.float32)
            f.write(a.astype("<f4").tobytes())
    print(f"{out_dir}: {len(ts)} tensors, {off / 4 / 1e6:.1f}M parameters")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--part", choices=["unet", "vae"], default="unet")
    ap.add_argument("--preset", choices=["sd15", "sdxl"], default="sd15")
    ap.add_argument("--config", help="a unet config.json to follow instead of a preset")
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--list", action="store_true", help="print names and shapes only")
    a = ap.parse_args()
    presets = {("unet", "sd15"): SD15, ("unet", "sdxl"): SDXL, ("vae", "sd15"): VAE, ("vae", "sdxl"): VAE_SDXL}
    cfg = json.load(open(a.config)) if a.config else presets[(a.part, a.preset)]
    if a.list:
        for n, s in (vae_tensors(cfg) if cfg["_class_name"] == "AutoencoderKL" else tensors(cfg)):
            print(n, s)
    elif not a.out:
        ap.error("--out DIR is required (or --list)")
    else:
        write(cfg, a.out, a.seed)
