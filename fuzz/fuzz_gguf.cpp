// libFuzzer: arbitrary bytes as a .gguf file must load or fail with kvad::Error, never crash. Past
// the parser: the Hugging Face view (permutation, transposes), every small tensor dequantised, the
// config and the architecture's parser, the tokenizer built from the metadata, and the model's
// weights (K-quant, packed q8/q4 and dense) when the file is small.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "io/gguf.h"
#include "models/gguf_model.h"
#include "models/registry.h"
#include "backend/weight.h"
#include "runtime/gguf_loader.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<GgufFile> f;
  try {
    f = std::make_shared<GgufFile>(data, size, "fuzz.gguf");
  } catch (const Error&) {
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const GgufTensorInfo& t : f->tensors())
    if (t.nbytes) sink = sink + t.data[0] + t.data[t.nbytes - 1];  // every range must be readable
  try {
    GgufTokenizerParts tj = gguf_tokenizer(*f);
    Tokenizer tok = tokenizer_of_gguf(tj, "fuzz.gguf");
    tok.encode("Hello world 123 <|endoftext|>");
  } catch (const Error&) {
  }
  try {
    auto ck = std::make_shared<GgufCheckpoint>(f);  // every tensor under its GGUF name
    for (const std::string& n : ck->names()) {
      TensorView t = ck->get(n);
      if (t.numel() <= (1 << 16)) to_f32(t);
    }
    int64_t total = 0;
    for (const GgufTensorInfo& t : f->tensors()) total += t.nbytes;
    if (total <= (1 << 22)) {
      load_model_gguf(f, {});
    } else {
      Json cfg = gguf_model_config(*f);
      require_architecture(cfg, "fuzz.gguf").parse_config(cfg, "fuzz.gguf");
    }
  } catch (const Error&) {
  }
  return 0;
}
