#include "runtime/loader.h"

#include "models/config_parse.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/fs.h"
#include "io/hub.h"
#include "io/model_usage.h"
#include "io/store.h"
#include "runtime/gguf_loader.h"
#include "runtime/nq_cache.h"

namespace kvad {

ResolvedModel resolve_model(const std::string& name) {
  if (is_directory(name)) return {name, ""};
  if (is_gguf_path(name) && file_exists(name)) return {name, ""};
  if (file_exists(name))
    fail("{}: is a file; a model is named by its folder (config.json, model.safetensors, tokenizer.json) or by a .gguf "
         "file",
         name);
  if (auto dir = find_in_store(name)) return {*dir, "store:" + name};
  if (hf::looks_like_repo_ref(name)) {
    hf::RepoRef ref = hf::parse_repo_ref(name);
    std::string cache = hf::hub_cache_dir();
    auto c = hf::find_cached(cache, ref);
    if (!c)
      fail("{}: not downloaded (not a folder, not in kvad's store, not in the Hugging Face cache {}); run `kvad pull {}` "
           "(or add --pull)",
           name, cache, ref.str());
    if (!c->missing.empty()) {
      std::string missing;
      for (const std::string& m : c->missing) missing += (missing.empty() ? "" : ", ") + m;
      fail("{}: the copy in the Hugging Face cache ({}) is incomplete (missing {}); run `kvad pull {}` to finish it", name,
           c->dir, missing, ref.str());
    }
    if (!ref.file.empty() && c->files.size() == 1 && is_gguf_path(join_path(c->dir, c->files[0])))
      return {join_path(c->dir, c->files[0]), "hf:" + ref.repo_id};
    if (!ref.file.empty())
      fail("{}: {} is downloaded ({}), but kvad runs a single file only when it is a .gguf; name the whole model "
           "instead",
           name, c->files.empty() ? ref.file : c->files[0], c->dir);
    return {c->dir, "hf:" + ref.repo_id};
  }
  fail("{}: no such model folder, and no model of that name in kvad's store ({})", name, store_models_dir());
}

std::string resolve_model_path(const std::string& name) { return resolve_model(name).path; }

void finish_loaded_model(LoadedModel& m, const std::string& template_what, const std::vector<int32_t>& more_eos) {
  if (m.tokenizer->vocab_size() > m.model->config().vocab_size)
    fail("{}: the tokenizer has {} tokens but the model's vocabulary (embedding rows) is {}", m.path,
         m.tokenizer->vocab_size(), m.model->config().vocab_size);
  if (!m.tokenizer->chat_template().empty()) {
    try {
      m.chat_template = std::make_unique<ChatTemplate>(m.tokenizer->chat_template(), template_what);
    } catch (const Error& e) {  // reported when a chat is asked for
      m.chat_template_error = e.what();
    }
  }
  m.eos_ids = m.model->config().eos_ids;
  m.eos_ids.insert(m.eos_ids.end(), more_eos.begin(), more_eos.end());
  if (auto e = m.tokenizer->eos_id()) m.eos_ids.push_back(*e);
  std::sort(m.eos_ids.begin(), m.eos_ids.end());
  m.eos_ids.erase(std::unique(m.eos_ids.begin(), m.eos_ids.end()), m.eos_ids.end());
}

LoadedModel load_model(const std::string& name, const LoadOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  LoadedModel m;
  m.name = name;
  ResolvedModel where = resolve_model(name);
  m.path = where.path;
  m.key = where.key;
  if (is_gguf_path(m.path)) {  // model, tokenizer and template from the one file
    load_gguf_model(m, opts);
    m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    record_model_use(where.key);
    return m;
  }
  LoadOptions o = opts;
  if (o.cache_file.empty()) o.cache_file = nq_cache_file(where.key, where.path, opts.format);
  m.model = load_model_dir(m.path, o, &m.load_report);
  std::string tj = join_path(m.path, "tokenizer.json"), tc = join_path(m.path, "tokenizer_config.json");
  if (!file_exists(tj)) fail("{}: missing tokenizer.json (kvad needs the model's tokenizer)", m.path);
  m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(tj, file_exists(tc) ? tc : ""));
  std::string gc = join_path(m.path, "generation_config.json");
  if (file_exists(gc)) m.generation_config = read_json_file(gc);
  // generation_config's end-of-sequence ids, each checked against the vocabulary.
  std::vector<int32_t> gen_eos = generation_eos_ids(m.generation_config, m.model->config().vocab_size, gc);
  finish_loaded_model(m, tc + ": chat_template", gen_eos);
  m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  record_model_use(where.key);  // for `kvad ls` (best effort)
  return m;
}

}  // namespace kvad
