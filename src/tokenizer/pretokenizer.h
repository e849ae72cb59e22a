// Normalizer and pre-tokenizer of tokenizer.json, restricted to what byte-level BPE tokenizers use:
//   normalizer:    null, NFC/NFD/NFKC/NFKD, or a Sequence of those
//   pre_tokenizer: ByteLevel (optionally with the GPT-2 regex), or a Sequence of Split / Digits
//                  steps ending in ByteLevel (Llama 3, Qwen2/3, DeepSeek)
// Anything else is reported as unsupported rather than tokenised differently from HF.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tokenizer/pcre_regex.h"
#include "tokenizer/tokenizer_json.h"

namespace kvad::tok {

class Normalizer {
 public:
  // `j` is the "normalizer" value or nullptr when absent/null.
  static Normalizer from_json(const Json* j, const Field& f);
  bool active() const { return !forms_.empty(); }
  std::string apply(std::string_view text) const;

 private:
  void add(const Json& j, const Field& f, size_t depth = 0);
  std::vector<int> forms_;  // utf8proc option sets, applied in order
};

// How a Split step turns matches into pieces (HF's SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class PreTokenizer {
 public:
  static PreTokenizer from_json(const Json* j, const Field& f);

  // Calls emit(piece) for every pre-token of `text`, in order. Pieces are raw UTF-8 bytes (the
  // byte-level alphabet is applied implicitly by the BPE model) and never empty.
  template <typename Emit>
  void run(std::string_view text, Emit&& emit) const {
    using F = std::remove_reference_t<Emit>;
    run_from(0, text, FnRef{(void*)&emit, [](void* f, std::string_view p) { (*(F*)f)(p); }});
  }

 private:
  struct FnRef {
    void* obj;
    void (*call)(void*, std::string_view);
    void operator()(std::string_view p) const { call(obj, p); }
  };
  struct Step {
    enum Kind { kSplit, kByteLevel } kind = kSplit;
    std::unique_ptr<Regex> regex;  // Split pattern, or GPT-2's regex for ByteLevel with use_regex
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;
  };
  void add(const Json& j, const Field& f, size_t depth = 0);
  void run_from(size_t step, std::string_view text, const FnRef& emit) const;
  std::vector<Step> steps_;
};

}  // namespace kvad::tok
