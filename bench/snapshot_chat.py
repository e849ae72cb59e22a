#!/usr/bin/env python3
"""Recurrent-state snapshots on a 6-turn chat: time to first token and memory, per --snapshot-every.

    bench/snapshot_chat.py MODEL_DIR [--kvad build/kvad] [--every 0,16,64,256,1024] [--rounds 2]

A model with recurrent layers (Qwen3-Next) cannot rewind its state, so a server can reuse an earlier
request's prefix only from a snapshot of the state at or before where the two prompts part. The chat:
a system prompt, then per turn a user message and a reply of --reply tokens (greedy); each turn's prompt
is the previous prompt + the reply as the client sends it back (text, re-tokenised by /tokenize, as a
chat client's history is) + an end-of-turn token + the next user message. For each --snapshot-every
value (0 = no snapshots) one `kvad serve --parallel 1 -q q8` runs the whole chat; values take turns
within each round (interleaved: the machine is shared). Per turn: prompt tokens, cached_tokens and the
time to first token (/kvad/stats last.ttft_s); per value: snapshots kept and their bytes.
"""
import argparse
import json
import random
import statistics
import subprocess
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--kvad", default="build/kvad")
ap.add_argument("--every", default="0,16,64,256,1024")
ap.add_argument("--snapshots", default="-1", help="--snapshots values to try with each --every (-1: the default)")
ap.add_argument("--rounds", type=int, default=2)
ap.add_argument("--turns", type=int, default=6)
ap.add_argument("--system", type=int, default=400, help="system prompt tokens")
ap.add_argument("--user", type=int, default=60, help="tokens per user message")
ap.add_argument("--reply", type=int, default=120, help="tokens per reply")
ap.add_argument("--port", type=int, default=18131)
ap.add_argument("--json", action="store_true")
a = ap.parse_args()
URL = f"http://127.0.0.1:{a.port}"


def call(path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def chat(every, slots):
    cmd = [a.kvad, "serve", "--model", a.model, "--quant", "q8", "--ctx", "8192", "--parallel", "1", "--port",
           str(a.port), "--snapshot-every", str(every), "--quiet"] + (["--snapshots", str(slots)] if slots >= 0 else [])
    srv = subprocess.Popen(cmd, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            if srv.poll() is not None:
                raise SystemExit(f"kvad serve exited ({srv.returncode}): {' '.join(cmd)}")
            try:
                call("/health")
                break
            except Exception:
                time.sleep(0.2)
        rng = random.Random(7)
        vocab = call("/kvad/stats")["model"]["vocab"]
        words = lambda n: [rng.randrange(20, vocab - 2) for _ in range(n)]  # noqa: E731
        end = vocab - 1
        prompt = words(a.system) + words(a.user)
        turns = []
        for t in range(a.turns):
            r = call("/v1/completions", {"prompt": prompt, "max_tokens": a.reply, "temperature": 0, "ignore_eos": True})
            st = call("/kvad/stats")
            turns.append({"prompt_tokens": len(prompt), "cached_tokens": r["usage"]["prompt_tokens_details"]["cached_tokens"],
                          "ttft_s": st["last"]["ttft_s"]})
            reply = call("/tokenize", {"content": r["choices"][0]["text"]})["tokens"]
            prompt = prompt + reply + [end] + words(a.user)
        rs = call("/kvad/stats")["recurrent_state"]
        return {"every": every, "turns": turns, "snapshots": rs["snapshots"], "state_bytes": rs["bytes_per_sequence"]}
    finally:
        srv.terminate()
        srv.wait()


values = [(int(e), int(n)) for e in a.every.split(",") for n in a.snapshots.split(",")]
runs = {v: [] for v in values}
for _ in range(a.rounds):
    for v in values:
        runs[v].append(chat(*v))

base = None
if not a.json:
    print(f"{a.model}: {a.turns} turns, system {a.system} + user {a.user} + reply {a.reply} tokens per turn; "
          f"median of {a.rounds} rounds")
    print(f"{'every':>6} {'slots':>5} {'recomputed':>11} {'cached':>8} {'ttft sum s':>11} {'vs none':>8} {'snapshots':>10} {'their MB':>9}"
          f"   ttft per turn (s)")
for v in values:
    rows = runs[v]
    ttft = statistics.median(sum(t["ttft_s"] for t in r["turns"]) for r in rows)
    per_turn = [statistics.median(r["turns"][i]["ttft_s"] for r in rows) for i in range(a.turns)]
    r0 = rows[0]
    recomputed = sum(t["prompt_tokens"] - t["cached_tokens"] for t in r0["turns"])
    cached = sum(t["cached_tokens"] for t in r0["turns"])
    if base is None:
        base = ttft
    out = {"every": v[0], "snapshot_slots": v[1], "recomputed_tokens": recomputed, "cached_tokens": cached, "ttft_sum_s": ttft,
           "speedup_vs_first": base / ttft if ttft else None, "snapshots": r0["snapshots"],
           "snapshot_bytes": r0["snapshots"] * r0["state_bytes"], "state_bytes": r0["state_bytes"],
           "ttft_per_turn_s": per_turn, "prompt_tokens": [t["prompt_tokens"] for t in r0["turns"]]}
    if a.json:
        print(json.dumps(out))
    else:
        print(f"{v[0]:>6} {v[1] if v[1] >= 0 else 'dflt':>5} {recomputed:>11} {cached:>8} {ttft:>11.3f} {base / ttft:>7.2f}x {r0['snapshots']:>10} "
              f"{out['snapshot_bytes'] / 1e6:>9.2f}   " + " ".join(f"{x:.3f}" for x in per_turn))
