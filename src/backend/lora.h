// LoRA at run time: an adapter is a set of low-rank pairs (A [r, in], B [out, r]), each keyed by
// the base Weight it sits beside. The backend's linear adds scale * (x A^T) B^T to the rows whose
// sequence uses the adapter, unmerged: the base stays as loaded (mmapped, any format, quantised or
// not), one base serves any number of adapters, and sequences with different adapters (or none)
// share one forward because the choice travels with each sequence's span of the Batch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/weight.h"

namespace kvad {

struct LoraPair {
  // A [rank, in] and B transposed [rank, out] (the side path adds rank scaled rows of it): f32
  // beside an f32 base; bf16 beside any other (bf16, q8, q4, K-quants), whose own rounding is far
  // larger, and then a decode step reads half the adapter's bytes.
  Weight a;
  std::vector<float> bt;         // f32 B^T, or empty when
  std::vector<uint16_t> bt_bf16; // it is held here at bf16
  int64_t out = 0;
  float scale = 1;        // the adapter's own factor: alpha / rank (alpha / sqrt(rank) with rsLoRA)
};

class LoraAdapter {
 public:
  explicit LoraAdapter(std::string path) : path_(std::move(path)) {}
  const std::string& path() const { return path_; }
  // Refuses a second pair for the same base weight (a file naming one projection twice).
  void add(const Weight* base, LoraPair pair, const std::string& what);
  const LoraPair* find(const Weight* base) const {
    auto it = pairs_.find(base);
    return it == pairs_.end() ? nullptr : &it->second;
  }
  size_t size() const { return pairs_.size(); }
  int64_t max_rank() const;
  size_t bytes() const;

 private:
  std::string path_;
  std::unordered_map<const Weight*, LoraPair> pairs_;
};

// One adapter as a sequence uses it: its pairs times `scale` (the user's, e.g. --lora PATH:0.5).
struct LoraUse {
  const LoraAdapter* adapter = nullptr;
  float scale = 1;
  bool operator==(const LoraUse&) const = default;
};

}  // namespace kvad
