#include "runtime/gguf_loader.h"

#include <algorithm>

#include "core/error.h"
#include "io/gguf.h"
#include "tokenizer/bpe_tables.h"

namespace kvad {

Tokenizer tokenizer_of_gguf(const GgufTokenizerParts& tj, const std::string& what) {
  tok::BpeTables tables;
  tables.has_vocab = tables.has_merges = true;
  tables.vocab.reserve(tj.vocab.size(), 8 * tj.vocab.size());
  for (auto [piece, id] : tj.vocab) tables.vocab.insert(piece, id);  // a repeated piece keeps its first id
  const tok::Field merges_field{what, "model.merges"};
  for (size_t i = 0; i < tj.merges.size(); i++) tables.add_merge_text(tj.merges[i], i, merges_field);
  return Tokenizer::from_json(tj.tokenizer, tj.config, what, &tables);
}

Tokenizer load_gguf_tokenizer(const std::string& path) {
  GgufFile f(path);
  return tokenizer_of_gguf(gguf_tokenizer(f), path + " (GGUF tokenizer)");
}

void load_gguf_model(LoadedModel& m, const LoadOptions& opts) {
  if (opts.format != WeightFormat::AsStored)
    fail("{}: --quant {} does not apply to a GGUF file, which runs in the formats it was saved in (leave --quant "
         "out, or re-quantise the file with llama.cpp's llama-quantize)",
         m.path, weight_format_name(opts.format));
  m.model = load_model_gguf(m.path, opts);
  GgufFile f(m.path);  // parsed again: the metadata only, through a second mapping
  GgufTokenizerParts tj = gguf_tokenizer(f);
  m.tokenizer = std::make_unique<Tokenizer>(tokenizer_of_gguf(tj, m.path + " (GGUF tokenizer)"));
  finish_loaded_model(m, m.path + ": tokenizer.chat_template", tj.end_of_generation);
}

}  // namespace kvad
