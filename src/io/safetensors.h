// safetensors: u64 header length, a JSON header {name: {dtype, shape, data_offsets}}, then data.
// Read through mmap and validated fully before any tensor is used: header within the file,
// offsets in bounds and non-overlapping, shape x dtype == byte length, known dtypes.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mmap_file.h"
#include "io/checkpoint.h"

namespace kvad {

// One parsed .safetensors file (header validated; data mapped).
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  const std::string& path() const { return map_->path(); }
  // Parses from memory (for fuzzing and tests); `what` names the source in errors.
  static std::vector<TensorView> parse(const uint8_t* data, size_t size, const std::string& what);
  const std::vector<TensorView>& tensors() const { return tensors_; }
  bool maps(const void* p, size_t n) const { return map_->maps(p, n); }

 private:
  std::unique_ptr<MappedFile> map_;
  std::vector<TensorView> tensors_;
};

// A model folder's weights: model.safetensors, or the shards listed by model.safetensors.index.json.
class SafetensorsCheckpoint : public Checkpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& model_dir);
  // The same with other file names: diffusers' parts keep `diffusion_pytorch_model[.fp16].safetensors`
  // and `diffusion_pytorch_model.safetensors.index[.fp16].json` (image/pipeline_config.h finds them).
  SafetensorsCheckpoint(const std::string& model_dir, const std::string& single_name, const std::string& index_name);
  std::vector<std::string> names() const override;
  std::vector<std::string> files() const;  // the .safetensors paths read
  void release(const TensorView& t) const override;

 protected:
  const TensorView* lookup(const std::string& name) const override;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::unordered_map<std::string, const TensorView*> by_name_;
};

// Writes tensors as one .safetensors file, atomically (temp name, fsync, rename).
struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

// Streaming form for large files: the header comes from `specs` (bytes left empty) and each
// tensor's bytes from produce(i) as it is written, so only one tensor is in memory at a time.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& specs,
                       const std::function<std::string(size_t)>& produce);

}  // namespace kvad
