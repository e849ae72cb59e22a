#!/usr/bin/env python3
"""Prefix sharing through the server: 8 conversations that share a 1,000-token system prompt.

    bench/prefix_share.py MODEL_DIR [--kvad build/kvad] [--shared 1000] [--convs 8]

Starts `kvad serve --parallel CONVS --shared-prefix-cache` on MODEL_DIR (q8), sends conversation 1
alone (it computes and registers the shared blocks), then conversations 2..CONVS at once, streaming,
while it polls /kvad/stats for the KV blocks and bytes held. Prints what each conversation reported
as cached_tokens and the KV bytes held at the peak against what CONVS private copies would hold.
Prompts are token ids (/v1/completions), so the shared part is exactly --shared tokens.
"""
import argparse
import json
import random
import subprocess
import threading
import time
import urllib.request

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--kvad", default="build/kvad")
ap.add_argument("--shared", type=int, default=1000)
ap.add_argument("--own", type=int, default=24, help="tokens each conversation adds after the shared part")
ap.add_argument("--convs", type=int, default=8)
ap.add_argument("--max-tokens", type=int, default=48)
ap.add_argument("--port", type=int, default=18097)
a = ap.parse_args()
URL = f"http://127.0.0.1:{a.port}"


def get(path):
    with urllib.request.urlopen(URL + path, timeout=30) as r:
        return json.loads(r.read())


def complete(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(URL + "/v1/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


ctx = a.shared + a.own + a.max_tokens + 16
srv = subprocess.Popen([a.kvad, "serve", "--model", a.model, "--quant", "q8", "--ctx", str(ctx), "--parallel", str(a.convs),
                        "--port", str(a.port), "--shared-prefix-cache", "--quiet"])
try:
    for _ in range(600):
        try:
            get("/health")
            break
        except Exception:
            time.sleep(0.5)
    rng = random.Random(1)
    shared = [rng.randrange(100, 20000) for _ in range(a.shared)]
    prompts = [shared + [rng.randrange(100, 20000) for _ in range(a.own)] for _ in range(a.convs)]
    results = [None] * a.convs
    results[0] = complete(prompts[0])
    peak = {"kv_bytes": 0}
    done = threading.Event()

    def poll():
        while not done.is_set():
            s = get("/kvad/stats")
            if s["kv_bytes"] > peak["kv_bytes"]:
                peak.update(kv_bytes=s["kv_bytes"], blocks=s["kv_blocks"], running=s["engine"]["running"])
            time.sleep(0.05)

    poller = threading.Thread(target=poll)
    poller.start()

    def run(i):
        results[i] = complete(prompts[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(1, a.convs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    poller.join()
    st = get("/kvad/stats")
    per_token, bs = st["kv_bytes_per_token"], st["kv_blocks"]["block_size"]
    cached = [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in results]
    print(f"model {a.model}: {a.convs} conversations, a shared prompt of {a.shared} tokens + {a.own} own, "
          f"{a.max_tokens} generated each; KV {per_token} B/token, blocks of {bs}")
    print("cached_tokens per conversation:", cached)
    private = a.convs * (a.shared + a.own + a.max_tokens) * per_token
    print(f"peak KV held: {peak['kv_bytes'] / 2**20:.1f} MiB ({peak['blocks']['used']} blocks used, "
          f"{peak.get('running')} running); {a.convs} private copies would hold {private / 2**20:.1f} MiB "
          f"({peak['kv_bytes'] / private:.2f}x)")
    one_prompt = a.shared // bs * bs * per_token
    print(f"the shared prompt's full blocks: {one_prompt / 2**20:.1f} MiB once")
finally:
    srv.terminate()
    srv.wait()
