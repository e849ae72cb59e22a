// Loading a model named by a .gguf file (runtime/loader.h calls this): the model through the
// registry (models/registry.h load_model_gguf), the tokenizer and chat template from the file's
// metadata (io/gguf.h gguf_tokenizer), and the end-of-generation ids llama.cpp would use.
#pragma once
#include "io/gguf.h"
#include "runtime/loader.h"

namespace kvad {

// Fills m.model, m.tokenizer, m.chat_template(_error) and m.eos_ids for the file at m.path.
// opts.format must be AsStored: a GGUF file runs in the formats it was saved in.
void load_gguf_model(LoadedModel& m, const LoadOptions& opts);
// The tokenizer of a .gguf file alone (its metadata: no tensor is read).
Tokenizer load_gguf_tokenizer(const std::string& path);
// The tokenizer gguf_tokenizer() describes (its vocab and merges views into a GgufFile that is
// still open); `what` names it in errors.
Tokenizer tokenizer_of_gguf(const GgufTokenizerParts& tj, const std::string& what);

}  // namespace kvad
