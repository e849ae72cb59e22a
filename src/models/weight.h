// Weight: one type for a 2-D parameter [rows = outputs, cols = inputs]. It answers both questions a
// model asks of a matrix: matmul(x) and row(i) (the embedding lookup). Because one type does both
// jobs, a tied embedding is one object used twice and stored once.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "kernels/matmul.h"

namespace kvad {

// What a dense checkpoint tensor becomes in memory.
enum class DenseFormat {
  AsStored,  // F32 stays F32, BF16 stays BF16 (both used in place from the mmap), F16 -> F32
  F32,       // everything widened to f32 (the reference path)
  BF16,      // everything rounded to bf16 (half the bytes to read per token)
};

class Weight {
 public:
  Weight() = default;
  // From a [rows, cols] tensor; zero-copy when the stored dtype is the wanted format.
  static Weight from_tensor(const TensorView& t, DenseFormat fmt);
  // From a [cols, rows] tensor (GPT-2's Conv1D stores [in, out]): transposed once at load.
  static Weight from_tensor_transposed(const TensorView& t, DenseFormat fmt);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // y[n, rows] = x[n, cols] * W^T
  void matmul(const float* x, int64_t n, float* y) const;
  // out[cols] = W[i, :]
  void row(int64_t i, float* out) const;
  size_t bytes() const;
  const char* format_name() const;
  bool empty() const { return data_ == nullptr; }

 private:
  int64_t rows_ = 0, cols_ = 0;
  kernels::WType wt_ = kernels::WType::F32;
  const void* data_ = nullptr;
  std::shared_ptr<std::vector<uint8_t>> owned_;  // set when converted at load
};

// A 1-D parameter (norm weights, biases) as f32, whatever the checkpoint stored.
std::vector<float> to_f32(const TensorView& t);

}  // namespace kvad
