#include "runtime/gguf_loader.h"

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
  finish_loaded_model(m, m.path + ": tokenizer.chat_template", tj.end_of_generation);
}

}  // namespace kvad
