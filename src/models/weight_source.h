// WeightSource: what the family loaders read their parameters through. It turns checkpoint
// tensors into Weights in the requested format (quantising when asked), serves already-packed
// tensors from a .nq cache as they are, and records what it handed out so the load can be written
// to a cache afterwards. FP8 checkpoints (DeepSeek-V3's F8_E4M3 weights, each with a
// `<name>_scale_inv` of per-block scales) are dequantised here one tensor at a time and then
// take the same path as any f32 tensor into the asked format (bf16 when none was asked).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "io/nq.h"
#include "backend/weight.h"
#include "models/config.h"

namespace kvad {

class WeightSource {
 public:
  // `fp8`: the block shape of the checkpoint's scales (ModelConfig::fp8_blocks), none if not FP8.
  WeightSource(Checkpoint& ck, WeightFormat fmt, bool record, Fp8Blocks fp8 = {})
      : ck_(ck), fmt_(fmt), record_(record), fp8_(fp8) {}

  // Copy the matrices used in place into huge pages (LoadOptions::copy_in_place_weights), up to
  // half the memory available; the checkpoint's pages of each copied one are released.
  void copy_in_place_weights();

  // A [rows, cols] matrix.
  Weight matrix(const std::string& name, int64_t rows, int64_t cols);
  // A matrix stored [in, out] (GPT-2's Conv1D), returned as [out, in].
  Weight matrix_transposed(const std::string& name, int64_t in, int64_t out);
  // A parameter used element-wise (norms, biases, position table) as f32. An F8_E4M3 one is
  // dequantised with its block scales (DeepSeek's kv_b_proj), and refused without them.
  std::vector<float> vector(const std::string& name, const std::vector<int64_t>& shape);
  bool has(const std::string& name) const { return ck_.has(name); }
  // True when checkpoint tensors a and b hold the same bytes (a saved copy of a tied matrix).
  // Either way both count as read.
  bool same_tensor(const std::string& a, const std::string& b, const std::vector<int64_t>& shape);
  Checkpoint& checkpoint() { return ck_; }
  WeightFormat format() const { return fmt_; }

  // Calls f(tensors read, tensors in the checkpoint) after each matrix or vector handed out.
  void report_progress(WeightsProgress f);

  // What a .nq cache of this load must hold (only when recording).
  void write_cache(const std::string& path, const Json& stamp) const;

 private:
  // A [rows, cols] checkpoint tensor in the asked format.
  Weight dense(const TensorView& t);
  // w as matrix() returns it: copied into huge pages when it is t's bytes used in place and the
  // budget allows; a tensor asked for twice (a tied matrix) is copied once. When w is a
  // conversion (quantised at load), t's file pages are released: the first q8 run of a bf16
  // 0.5B model held them (1 GB) beside the quantised copy until it exited.
  Weight held(Weight w, const TensorView& t);
  // An F8_E4M3 tensor times its `<name>_scale_inv` blocks, as f32 (the scales count as read).
  std::vector<float> fp8_values(const TensorView& t);

  Checkpoint& ck_;
  WeightFormat fmt_;
  bool record_;
  Fp8Blocks fp8_;
  struct Recorded {
    std::string name;
    Weight w;
    std::shared_ptr<std::vector<float>> v;
    std::vector<int64_t> shape;
  };
  std::vector<Recorded> recorded_;
  std::vector<std::pair<std::string, std::string>> aliases_;
  void read_one();  // counts a tensor handed out, for report_progress
  WeightsProgress progress_;
  int64_t read_ = 0, total_ = 0;
  size_t copy_budget_ = 0;
  std::map<const uint8_t*, Weight> copied_;  // by the checkpoint bytes they were copied from
};

}  // namespace kvad
