#!/usr/bin/env node
// Greedy continuation of a token-id prompt in llama.cpp (the peer harness's prebuilt binding):
//   node tools/peer_greedy.mjs MODEL.gguf TOKENS_JSON N [--threads 2]
// prints {"prompt": [...], "greedy": [N ids]} (EOS is not special here: it continues past it).
// Used by tools/make_model_goldens.sh to make test fixtures; the tests themselves never run it.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const CACHE = process.env.KVAD_PEER_HOME || path.join(os.homedir(), ".cache", "kvad-peer");
const nlc = await import(pathToFileURL(path.join(CACHE, "node_modules", "node-llama-cpp", "dist", "index.js")).href);
const [file, tokFile, nStr] = process.argv.slice(2);
const threads = process.argv.includes("--threads") ? +process.argv[process.argv.indexOf("--threads") + 1] : 2;
const prompt = JSON.parse(fs.readFileSync(tokFile, "utf8"));
const n = +nStr;
const llama = await nlc.getLlama({ gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true,
                                   progressLogs: false, maxThreads: 0, logLevel: nlc.LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: path.resolve(file), gpuLayers: 0 });
// f32 KV cache and no flash attention: llama.cpp's f32 path, so a near-tie in the random weights is
// not decided by f16 rounding of the cache.
const ctx = await model.createContext({ contextSize: Math.max(prompt.length + n + 8, 64), batchSize: 512, threads,
                                        sequences: 1, ignoreMemorySafetyChecks: true, flashAttention: false,
                                        experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32" });
const seq = ctx.getSequence();
const res = await seq.controlledEvaluate(prompt.map((t, i) => i === prompt.length - 1 ? [t, { generateNext: { token: true } }] : t));
let next = res[prompt.length - 1].next.token;
const greedy = [];
for (let i = 0; i < n; i++) {
    greedy.push(next);
    if (i === n - 1) break;
    const out = await seq.controlledEvaluate([[next, { generateNext: { token: true } }]]);
    next = out[0].next.token;
}
console.log(JSON.stringify({ prompt, greedy }));
await ctx.dispose(); await model.dispose(); await llama.dispose();
