// The pre-tokenizer of tokenizer.json: how the normalised text is cut into words for the model.
//   ByteLevel {add_prefix_space, use_regex}   GPT-2's regex and byte alphabet; must come last
//   Split {pattern, behavior, invert}, Digits  Llama 3, Qwen2/3, DeepSeek, Gemma
//   Metaspace {replacement, prepend_scheme, split}  SentencePiece's "▁" (Llama 2 style, T5)
//   WhitespaceSplit                            words between Unicode white space (T5)
//   Sequence {pretokenizers}, or none at all (the whole text is one word: Llama 2, Mistral)
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

// How a Split step turns matches into pieces (HF's SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class PreTokenizer {
 public:
  static PreTokenizer from_json(const Json* j, const Field& f);

  // Ends in ByteLevel: the model works on bytes (its vocabulary is in GPT-2's byte alphabet).
  bool byte_level() const { return !steps_.empty() && steps_.back().kind == Step::kByteLevel; }

  // Calls emit(piece) for every pre-token of `text`, in order. Pieces are raw UTF-8 bytes (the
  // byte-level alphabet is applied implicitly by the BPE model) and never empty. `at_start`:
  // `text` begins the input (Metaspace's prepend_scheme "first" prefixes only there).
  template <typename Emit>
  void run(std::string_view text, bool at_start, Emit&& emit) const {
    using F = std::remove_reference_t<Emit>;
    run_from(0, text, at_start, FnRef{(void*)&emit, [](void* f, std::string_view p) { (*(F*)f)(p); }});
  }

 private:
  struct FnRef {
    void* obj;
    void (*call)(void*, std::string_view);
    void operator()(std::string_view p) const { call(obj, p); }
  };
  enum class Prepend { kAlways, kFirst, kNever };  // Metaspace's prepend_scheme
  struct Step {
    enum Kind { kSplit, kByteLevel, kMetaspace, kWhitespaceSplit } kind = kSplit;
    std::unique_ptr<Regex> regex;  // Split pattern, or GPT-2's regex for ByteLevel with use_regex
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;  // ByteLevel
    std::string replacement;        // Metaspace: the character standing for a space
    Prepend prepend = Prepend::kAlways;
    bool split = true;              // Metaspace: a new word starts at each replacement
  };
  void add(const Json& j, const Field& f, size_t depth = 0);
  static Step read_metaspace(const Json& j, const Field& f);
  void run_from(size_t step, std::string_view text, bool at_start, const FnRef& emit) const;
  void run_split(size_t index, std::string_view text, bool at_start, const FnRef& emit) const;
  void run_metaspace(size_t index, std::string_view text, bool at_start, const FnRef& emit) const;
  void run_whitespace_split(size_t index, std::string_view text, bool at_start, const FnRef& emit) const;
  std::vector<Step> steps_;
};

}  // namespace kvad::tok
