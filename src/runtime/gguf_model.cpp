#include "runtime/gguf_model.h"

#include <algorithm>

#include "core/error.h"
#include "io/gguf.h"

namespace kvad {

Tokenizer load_gguf_tokenizer(const std::string& path) {
  GgufFile f(path);
  GgufTokenizerJson tj = gguf_tokenizer(f);
  return Tokenizer::from_json(tj.tokenizer, tj.config, path + " (GGUF tokenizer)");
}

void load_gguf_model(LoadedModel& m, const LoadOptions& opts) {
  if (opts.format != WeightFormat::AsStored)
    fail("{}: --quant {} does not apply to a GGUF file, which runs in the formats it was saved in (leave --quant "
         "out, or re-quantise the file with llama.cpp's llama-quantize)",
         m.path, weight_format_name(opts.format));
  m.model = load_model_gguf(m.path, opts);
  GgufFile f(m.path);  // parsed again: the metadata only, through a second mapping
  GgufTokenizerJson tj = gguf_tokenizer(f);
  m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_json(tj.tokenizer, tj.config, m.path + " (GGUF tokenizer)"));
  if (m.tokenizer->vocab_size() > m.model->config().vocab_size)
    fail("{}: the tokenizer has {} tokens but token_embd.weight has {} rows", m.path, m.tokenizer->vocab_size(),
         m.model->config().vocab_size);
  if (!m.tokenizer->chat_template().empty()) {
    try {
      m.chat_template = std::make_unique<ChatTemplate>(m.tokenizer->chat_template(), m.path + ": tokenizer.chat_template");
    } catch (const Error& e) {  // reported when a chat is asked for
      m.chat_template_error = e.what();
    }
  }
  m.eos_ids = m.model->config().eos_ids;
  m.eos_ids.insert(m.eos_ids.end(), tj.end_of_generation.begin(), tj.end_of_generation.end());
  if (auto e = m.tokenizer->eos_id()) m.eos_ids.push_back(*e);
  std::sort(m.eos_ids.begin(), m.eos_ids.end());
  m.eos_ids.erase(std::unique(m.eos_ids.begin(), m.eos_ids.end()), m.eos_ids.end());
}

}  // namespace kvad
