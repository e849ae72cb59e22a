// The reader every model is loaded through. It hands out named tensors, records which names were
// read, and at the end of a load reports every name that was not: the unread-tensor guard. A
// checkpoint that holds a weight no code reads is an error, not a silently smaller model.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace kvad {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;  // where it came from, for error messages
  // The bytes hold the transpose of `shape` (a 2-D [a, b] stored row-major as [b, a]): GGUF keeps
  // GPT-2's matrices [out, in] where the HF checkpoint (and so `shape`) says Conv1D [in, out].
  // Block formats (dtype_is_block) are only ever blocked along the stored rows.
  bool transposed = false;

  int64_t numel() const;
  int64_t dim(int i) const { return shape.at((size_t)i); }
  std::string shape_str() const;
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;

  // All tensor names the checkpoint holds.
  virtual std::vector<std::string> names() const = 0;
  bool has(const std::string& name) const { return lookup(name) != nullptr; }

  // Returns the tensor and marks it read. Missing -> error naming it and the checkpoint.
  TensorView get(const std::string& name);
  // Same, but checks the shape (and that dtype is a float type) and says what was expected.
  TensorView get(const std::string& name, const std::vector<int64_t>& shape);
  std::optional<TensorView> get_optional(const std::string& name, const std::vector<int64_t>& shape);

  // The guard: throws naming every tensor that was never read, except names that contain one of
  // `ignorable` (e.g. "rotary_emb.inv_freq").
  void check_all_read(const std::vector<std::string>& ignorable) const;
  const std::string& description() const { return description_; }
  // Called by a load that copied (converted) a tensor and will not read its bytes again: a
  // checkpoint over a file mapping drops those pages from the process's resident memory
  // (release_mapped_pages); the default, for memory that is not a file's, does nothing.
  virtual void release(const TensorView&) const {}

 protected:
  virtual const TensorView* lookup(const std::string& name) const = 0;
  std::string description_;

 private:
  std::set<std::string> read_;
};

}  // namespace kvad
