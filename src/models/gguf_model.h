// GGUF files (io/gguf.h) as models. io knows no architecture; here the file's general.architecture
// picks the family descriptor (models/registry.h), whose GGUF description turns the metadata into
// the config.json its parser reads (a table of key copies plus the family's `finish`), and whose
// tensor table gives the GGUF -> Hugging Face name map the checkpoint presents.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "core/json.h"
#include "io/gguf.h"
#include "models/registry.h"

namespace kvad {

// The family of a GGUF architecture name, or nullptr.
const Architecture* find_gguf_architecture(const std::string& gguf_arch);
std::string supported_gguf_architectures();  // "llama, qwen2, ..."

// config.json for the family parsers from the file's metadata: vocab_size from token_embd.weight,
// the tokenizer's bos/eos/eot/eom ids, then the family's keys and `finish`. Throws naming the file
// for an architecture no family reads.
Json gguf_model_config(const GgufFile& f);
// The checkpoint view of the file for a parsed config: the family's names, Conv1D transposes and
// un-permuted Q/K rows; the tensors its metadata step read are marked read.
std::shared_ptr<GgufCheckpoint> gguf_checkpoint(std::shared_ptr<const GgufFile> file, const Architecture& arch,
                                                const ModelConfig& config);

// For the families' `finish`: a metadata integer in 1 .. 2^31 (missing or an array: an error
// naming the key), and the same when present.
int64_t gguf_count(const GgufFile& f, const std::string& key);
std::optional<int64_t> gguf_optional_count(const GgufFile& f, const std::string& key);

}  // namespace kvad
