// Helpers shared by the families' config.json parsers (and the GGUF metadata, which arrives as a
// config.json-shaped Json). Every number and id from a file is checked here before the forward
// pass or an allocation uses it: a wrong one is a kvad::Error naming the file and the field.
#pragma once
#include <string>
#include <vector>

#include "core/json.h"
#include "models/config.h"

namespace kvad {

// Bounds on sizes from config files. The largest real models are far inside them (hidden 16384-
// 25600, vocab 262144, 126 layers, 128 heads, context 10M); they keep every product the loader
// and the KV cache compute far from overflowing 64 bits.
struct ConfigBounds {
  static constexpr int64_t kMaxVocab = int64_t(1) << 24;  // = tokenizer's token-id bound
  static constexpr int64_t kMaxHidden = int64_t(1) << 20;
  static constexpr int64_t kMaxIntermediate = int64_t(1) << 22;
  static constexpr int64_t kMaxLayers = int64_t(1) << 12;
  static constexpr int64_t kMaxHeads = int64_t(1) << 12;
  static constexpr int64_t kMaxHeadDim = int64_t(1) << 14;
  static constexpr int64_t kMaxPositions = int64_t(1) << 26;
};

// A required positive integer field.
int64_t positive_field(const Json& j, const char* key, const std::string& what);
// eos_token_id may be an int or a list of ints; each a valid token id (0 .. 2^24).
std::vector<int32_t> eos_ids_field(const Json& j, const std::string& what);
// bos_token_id: -1 when absent or null, else a token id (0 .. 2^24), checked on the full value (a
// cast to int32 first would turn 2^32 + 1 into token 1).
int32_t bos_id_field(const Json& j, const std::string& what);
// generation_config.json's eos_token_id (an id or a list), each checked against the vocabulary.
std::vector<int32_t> generation_eos_ids(const Json& generation_config, int64_t vocab_size, const std::string& what);
// "architectures"[0] when it is a non-empty list, "" when the field is absent or null; any other
// shape (a string, a list whose first entry is not a string) is an error naming the field.
std::string architecture_field(const Json& j, const std::string& what);
// "quantization_config": absent or null -> no FP8 blocks; quant_method "fp8" (e4m3, dynamic
// activations) -> its weight_block_size, each a positive count; any other method (gptq, awq,
// bitsandbytes, ...) is an error naming the key and the method, since kvad reads none of them.
Fp8Blocks quantization_field(const Json& j, const std::string& what);
// Checks the ranges of every field and the relations between them that the forward pass relies
// on: sizes within ConfigBounds, eps / rope values finite, rope frequencies and angles over the
// whole context finite, bos/eos ids inside the vocabulary.
void validate_config(const ModelConfig& c, const std::string& what);

}  // namespace kvad
