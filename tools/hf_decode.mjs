#!/usr/bin/env node
// Decodes id lists with the same HF reference implementation peer/hf_tokenize.mjs encodes with
// (@huggingface/tokenizers from the peer harness cache): the decode goldens of
// tools/make_tokenizer_goldens.py. Loading a tokenizer once for all lists keeps Gemma's 33 MB file cheap.
//   node tools/hf_decode.mjs HF_DIR IDS_FILE   (IDS_FILE: JSON array of id arrays)
//   -> JSON array of strings (skip_special_tokens=false, clean_up_tokenization_spaces from the config)
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";

const CACHE = process.env.KVAD_PEER_HOME || path.join(os.homedir(), ".cache", "kvad-peer");
const MOD = path.join(CACHE, "node_modules", "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(MOD).href);

const [dir, idsFile] = process.argv.slice(2);
if (!dir || !idsFile) {
    process.stderr.write("usage: node tools/hf_decode.mjs HF_DIR IDS_FILE\n");
    process.exit(2);
}
const tj = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const tcPath = path.join(dir, "tokenizer_config.json");
const tc = fs.existsSync(tcPath) ? JSON.parse(fs.readFileSync(tcPath, "utf8")) : {};
const tok = new Tokenizer(tj, tc);
const lists = JSON.parse(fs.readFileSync(idsFile, "utf8"));
// decode() refuses an empty list; its text is "".
console.log(JSON.stringify(lists.map((ids) => (ids.length ? tok.decode(ids) : ""))));
