// Embeddings from a decoder model: the final hidden states of an input's tokens pooled into one
// vector, the way the model's sentence-transformers config says (modules.json names a Pooling
// module whose config.json picks the mode, and a Normalize module when the vectors are unit
// length: Qwen3-Embedding pools its last token and normalises). A folder without that config is
// pooled by the mean of its tokens and normalised, as OpenAI's embeddings are.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace kvad {

enum class Pooling { Mean, LastToken, Cls, Max, MeanSqrtLen, WeightedMean };
const char* pooling_name(Pooling p);

struct EmbeddingSpec {
  Pooling pooling = Pooling::Mean;
  bool normalize = true;
  std::string source = "default (no sentence-transformers config)";  // where the choice came from
};

// Reads modules.json and the Pooling module's config.json in `model_dir` (a .gguf or a folder
// without them: the default). A config kvad cannot follow (a Dense layer, several modes at once)
// is refused by name rather than pooled some other way.
EmbeddingSpec embedding_spec(const std::string& model_dir);

struct Embeddings {
  std::vector<std::vector<float>> vectors;  // one per input, in order
  int64_t tokens = 0;                       // prompt tokens read
};

// Embeds `inputs` (token ids) through the engine, several inputs per forward (at most
// `rows_per_forward` rows, or one input when it alone is longer). `dimensions` > 0 keeps the first
// that many values (Matryoshka truncation, as OpenAI's `dimensions`), normalised again when the
// spec normalises; it must be at most the model's width.
Embeddings embed(Engine& engine, const std::vector<std::vector<int32_t>>& inputs, const EmbeddingSpec& spec,
                 int64_t dimensions = 0, int64_t rows_per_forward = 512);

}  // namespace kvad
