#!/usr/bin/python3
"""kvad vs llama.cpp, side by side on this machine, on the same synthesized weights.

Synthesizes a checkpoint (default: Qwen2.5-0.5B shapes, bf16), converts it to GGUF with the peer
harness (../shared/peer/to_gguf.py: F16, Q8_0, Q4_0), then runs, interleaved so that drifting
machine load hits both alike:
    kvad bench  --quant bf16|q8|q4        (the HF checkpoint, kvad's own formats)
    kvad bench  on the Q8_0 / Q4_0 GGUF   (llama.cpp's own files, when kvad can read GGUF)
    llama.cpp   on F16 / Q8_0 / Q4_0: its own llama-batched-bench (../shared/peer/build-llamacpp,
                built once, ~6 min), or with --llama binding the node binding's bench
                (../shared/peer/llamacpp.mjs: a per-token round trip through JavaScript that read
                half of llama-batched-bench's decode on the same files, docs/kernels.md)
and prints prefill and decode tok/s for each and the ratios the fast-CPU issue sets targets for.

  /usr/bin/python3 bench/compare_llamacpp.py [--preset qwen2.5-0.5b] [--arch qwen2] [--threads 2]
      [--prompt-tokens 128,512] [--gen-tokens 128] [--reps 3] [--rounds 2] [--work /tmp/kvad-bench]
      [--llama native|binding] [--json-out FILE]

Needs an idle machine: both engines spin their threads, so another busy process on 2 cores makes
every figure meaningless. It waits (up to --max-wait s) for the 1-minute load to drop below 0.5
and reports other processes' CPU use per run (other_procs_cpu_cores).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.path.join(os.path.dirname(ROOT), "shared", "peer")


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r.stdout


def wait_idle(max_wait):
    t0 = time.time()
    while os.getloadavg()[0] > 0.5 and time.time() - t0 < max_wait:
        time.sleep(10)
    return os.getloadavg()[0]


def kvad_bench(kvad, model, quant, a):
    cmd = [kvad, "bench", "--model", model, "--prompt-tokens", a.prompt_tokens, "--gen-tokens", str(a.gen_tokens),
           "--reps", str(a.reps), "--threads", str(a.threads), "--json"]
    if quant:
        cmd += ["--quant", quant]
    return [json.loads(l) for l in run(cmd).splitlines() if l.startswith("{")]


def llama_bench(gguf, P, G, a):
    if a.llama == "binding":
        out = run(["node", os.path.join(PEER, "llamacpp.mjs"), "bench", gguf, "--prompt-tokens", str(P), "--gen-tokens",
                   str(G), "--threads", str(a.threads), "--reps", str(a.reps)])
        return json.loads(out.strip().splitlines()[-1])
    return llama_batched_bench(gguf, P, G, a)


def busy_seconds():
    """CPU seconds the whole machine has spent busy (/proc/stat), and this process's children's."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    t = os.times()
    return (sum(v[:8]) - idle) / os.sysconf("SC_CLK_TCK"), t.children_user + t.children_system


def llama_batched_bench(gguf, P, G, a):
    """llama.cpp's own llama-batched-bench, one sequence, `reps` runs: the same JSON fields as the
    binding's bench (medians of S_PP and S_TG), and the cores other processes kept busy."""
    d = a.llama_bin
    cmd = [os.path.join(d, "llama-batched-bench"), "-m", gguf, "-t", str(a.threads), "-c", str(P + G + 16),
           "-b", "2048", "-ub", "512", "-npp", str(P), "-ntg", str(max(G, 1)), "-npl", "1"]  # it needs a TG of 1+
    env = dict(os.environ, LD_LIBRARY_PATH=d)
    pp, tg, other = [], [], []
    for _ in range(a.reps):
        b0, c0, t0 = *busy_seconds(), time.time()
        out = run(cmd, env=env)
        b1, c1, t1 = *busy_seconds(), time.time()
        other.append(round(max(0.0, ((b1 - b0) - (c1 - c0)) / (t1 - t0)), 2))
        rows = [l.split("|")[1:-1] for l in out.splitlines() if l.startswith("|") and l.split("|")[1].strip().isdigit()]
        if not rows:
            sys.exit(f"llama-batched-bench printed no result row:\n{out[-2000:]}")
        f = [x.strip() for x in rows[0]]  # PP, TG, B, N_KV, T_PP, S_PP, T_TG, S_TG, T, S
        pp.append(float(f[5]))
        tg.append(float(f[7]))
    stat = lambda v: {"median": statistics.median(v), "min": min(v), "max": max(v)}
    return {"prefill_tok_s": stat(pp), "decode_tok_s": stat(tg) if G > 0 else None, "other_procs_cpu_cores": other}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="qwen2.5-0.5b")
    ap.add_argument("--arch", default="qwen2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", default="128,512")
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of every configuration")
    ap.add_argument("--kvad", default=os.path.join(ROOT, "build", "kvad"))
    ap.add_argument("--work", default="/tmp/kvad-bench")
    ap.add_argument("--max-wait", type=int, default=600)
    ap.add_argument("--kvad-gguf", action="store_true", help="also run kvad on llama.cpp's GGUF files")
    ap.add_argument("--only", default="", help="comma list of configs to run, e.g. kvad-q8,llama-Q8_0")
    ap.add_argument("--llama", choices=["native", "binding"], default="native",
                    help="llama.cpp's own llama-batched-bench (default) or the node binding's bench")
    ap.add_argument("--json-out")
    a = ap.parse_args()
    if a.llama == "native":
        print("llama.cpp: llama-batched-bench from ../shared/peer/build-llamacpp (builds once)", flush=True)
        a.llama_bin = run([os.path.join(PEER, "build-llamacpp")]).strip().splitlines()[-1]
    hf = os.path.join(a.work, a.preset)
    if not os.path.exists(os.path.join(hf, "config.json")):
        print(f"synthesizing {a.preset} into {hf}", flush=True)
        run([a.kvad, "synth", "--arch", a.arch, "--preset", a.preset, "--out", hf])
    ggufs = {}
    for t in ("f16", "q8_0", "q4_0"):
        g = os.path.join(a.work, f"{a.preset}-{t}.gguf")
        if not os.path.exists(g):
            print(f"converting to {g}", flush=True)
            run(["/usr/bin/python3", os.path.join(PEER, "to_gguf.py"), hf, g, "--type", t])
        ggufs[t.upper()] = g
    Ps = [int(p) for p in a.prompt_tokens.split(",")]
    configs = [("kvad-bf16", "kvad", hf, "bf16"), ("kvad-q8", "kvad", hf, "q8"), ("kvad-q4", "kvad", hf, "q4"),
               ("llama-F16", "llama", ggufs["F16"], None), ("llama-Q8_0", "llama", ggufs["Q8_0"], None),
               ("llama-Q4_0", "llama", ggufs["Q4_0"], None)]
    if a.kvad_gguf:
        configs += [("kvad-gguf-Q8_0", "kvad", ggufs["Q8_0"], None), ("kvad-gguf-Q4_0", "kvad", ggufs["Q4_0"], None)]
    if a.only:
        keep = set(a.only.split(","))
        configs = [c for c in configs if c[0] in keep]
    # Warm the .nq caches so their one-time quantisation is not measured.
    for name, eng, model, quant in configs:
        if eng == "kvad" and quant in ("q8", "q4"):
            run([a.kvad, "run", "--model", model, "--quant", quant, "--prompt-tokens", "1", "-n", "1"])
    results = {c[0]: {P: {"prefill": [], "decode": [], "other": []} for P in Ps} for c in configs}
    for rnd in range(a.rounds):
        for name, eng, model, quant in configs:
            load = wait_idle(a.max_wait)
            if eng == "kvad":
                for j in kvad_bench(a.kvad, model, quant, a):
                    r = results[name][j["prompt_tokens"]]
                    r["prefill"].append(j["prefill_tok_s"]["median"])
                    if j["decode_tok_s"]:
                        r["decode"].append(j["decode_tok_s"]["median"])
                    r["other"] += j["other_procs_cpu_cores"]
                    r["bw_pct"] = j.get("decode_bandwidth_pct")
                    r["bytes"] = j["model_bytes"]
            else:
                for P in Ps:
                    j = llama_bench(model, P, a.gen_tokens, a)
                    r = results[name][P]
                    r["prefill"].append(j["prefill_tok_s"]["median"])
                    if j["decode_tok_s"]:
                        r["decode"].append(j["decode_tok_s"]["median"])
                    r["other"] += j["other_procs_cpu_cores"]
            print(f"round {rnd + 1}: {name} done (load before {load:.2f})", flush=True)
    med = lambda v: statistics.median(v) if v else float("nan")
    print(f"\n{a.preset}, {a.threads} threads, medians of {a.rounds} rounds x {a.reps} reps "
          f"(prompt lengths {a.prompt_tokens}, decode {a.gen_tokens} tokens)")
    print(f"{'config':16s} " + " ".join(f"{'pp' + str(P):>9s}" for P in Ps) + f" {'decode':>9s} {'max other cores':>16s}")
    for name, *_ in configs:
        r = results[name]
        other = max((x for P in Ps for x in r[P]["other"]), default=0)
        print(f"{name:16s} " + " ".join(f"{med(r[P]['prefill']):9.1f}" for P in Ps) +
              f" {med(r[Ps[0]]['decode']):9.2f} {other:16.2f}")
    pairs = [("kvad-q8", "llama-Q8_0", 1.2, 1.5), ("kvad-q4", "llama-Q4_0", 1.2, 1.5), ("kvad-bf16", "llama-F16", 1.0, None),
             ("kvad-gguf-Q8_0", "llama-Q8_0", 1.0, 1.0), ("kvad-gguf-Q4_0", "llama-Q4_0", 1.0, 1.0)]
    print("\nratios (kvad / llama.cpp) and targets:")
    summary = {}
    for k, l, dec_t, pre_t in pairs:
        if k not in results or l not in results:
            continue
        dec = med(results[k][Ps[0]]["decode"]) / med(results[l][Ps[0]]["decode"])
        pre = {P: med(results[k][P]["prefill"]) / med(results[l][P]["prefill"]) for P in Ps}
        summary[f"{k}/{l}"] = {"decode": dec, "prefill": pre}
        print(f"  {k:15s} / {l:11s}: decode {dec:5.2f}x (target {dec_t}x)  " +
              "  ".join(f"pp{P} {pre[P]:5.2f}x" for P in Ps) + (f" (target {pre_t}x)" if pre_t else ""))
    for name in results:
        if name.startswith("kvad") and results[name][Ps[0]].get("bw_pct"):
            print(f"  {name}: decode at {results[name][Ps[0]]['bw_pct']:.0f}% of measured read bandwidth (target 85%)")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"results": results, "ratios": summary, "args": vars(a)}, f, indent=1)


if __name__ == "__main__":
    main()
