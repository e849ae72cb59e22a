// Weight: one type for a 2-D parameter [rows = outputs, cols = inputs], dense (f32/bf16) or
// quantised (q8/q4, or ggml's K-quants as a GGUF file stores them). It answers both questions a
// model asks of a matrix: matmul(x) and row(i) (the embedding lookup, dequantised one row at a
// time). Because one type does both jobs, a tied embedding is one object used twice and stored
// once.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "kernels/matmul.h"
#include "quant/kquant.h"
#include "quant/packed.h"

namespace kvad {

// What a checkpoint tensor becomes in memory.
enum class WeightFormat {
  AsStored,  // F32 stays F32, BF16 stays BF16 (both used in place from the mmap), F16 -> F32
  F32,       // the reference path
  BF16,      // half the bytes of f32 to read per token
  Q8,        // int8 codes + f16 scale per 32 weights (8.5 bits)
  Q4,        // 4-bit codes + f16 scale and offset per 32 weights (5 bits)
  Q4K,       // ggml's Q4_K (quant/kquant.h): 4-bit codes, 6-bit scales and mins per 32, 4.5 bits
  Q6K,       // ggml's Q6_K: 6-bit codes, 8-bit scales per 16, 6.56 bits
};
// Parses "f32|bf16|q8|q4|q4k|q6k|auto"; throws naming the flag otherwise.
WeightFormat parse_weight_format(const std::string& s);
const char* weight_format_name(WeightFormat f);

class Weight {
 public:
  Weight() = default;
  // From a [rows, cols] tensor; zero-copy when the stored dtype is the wanted dense format. GGUF
  // block formats with AsStored: Q8_0, Q5_0 -> q8 and Q4_0, Q4_1 -> q4 losslessly; Q4_K, Q5_K,
  // Q6_K used in place; Q5_1 -> f32. Any other format dequantises first.
  static Weight from_tensor(const TensorView& t, WeightFormat fmt);
  // From a [cols, rows] tensor (GPT-2's Conv1D stores [in, out]): transposed once at load.
  static Weight from_tensor_transposed(const TensorView& t, WeightFormat fmt);
  // From values [rows, cols] in `fmt` (F32/BF16 copy them, the rest quantise).
  static Weight from_f32(std::vector<float> v, int64_t rows, int64_t cols, WeightFormat fmt);
  static Weight from_quant(QuantMatrix q);
  static Weight from_kquant(KQuantMatrix q);

  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // y[n, rows] = x[n, cols] * W^T
  void matmul(const float* x, int64_t n, float* y) const;
  // The same on the calling thread alone (a quantised weight uses the pool anyway): for products
  // too small to be worth a parallel region, whose cost is a wake-up of every thread, and on a
  // machine with other load, a wait for the slowest one.
  void matmul_serial(const float* x, int64_t n, float* y) const;
  // y_i = x * W_i^T for weights that share their input (q/k/v, gate/up): the input is quantised
  // once and one parallel region covers all of them when they are the same kind of weight.
  static void matmul_group(const float* x, int64_t n, std::initializer_list<std::pair<const Weight*, float*>> outs);
  // Independent products in one parallel region (a mixture-of-experts layer's experts, each on
  // its own rows): y = x W^T per job. Neighbouring jobs with the same input quantise it once. Any mix of formats.
  struct Job {
    const Weight* w;
    const float* x;  // [n, w->cols()] contiguous
    int64_t n;
    float* y;        // [n, w->rows()]
    // Called on the thread that computed them, once output columns [c0, c1) of every row of y
    // are done: work on those columns alone joins the product's parallel region (a LoRA pair's
    // t B^T) instead of running after it on one thread.
    void (*then)(const void* ctx, int64_t c0, int64_t c1) = nullptr;
    const void* ctx = nullptr;
  };
  static void matmul_jobs(const Job* jobs, int count);
  // out[cols] = W[i, :]
  void row(int64_t i, float* out) const;
  size_t bytes() const;
  const char* format_name() const;
  bool empty() const { return rows_ == 0; }
  bool quantized() const { return quantized_; }
  bool is_f32() const { return !quantized_ && !kq_ && wt_ == kernels::WType::F32; }
  const QuantMatrix& quant() const { return q_; }
  const KQuantMatrix& kquant() const { return kq_; }  // empty unless a K-quant weight
  // A dense weight's values, row-major [rows, cols] in dense_type() (f32 or bf16); another backend
  // copies them to its own memory. Null for a quantised weight.
  const void* dense_data() const { return quantized_ || kq_ ? nullptr : data_; }
  kernels::WType dense_type() const { return wt_; }
  // A dense weight used in place (f32/bf16 as stored: its bytes are the checkpoint's, in a file
  // mapping's 4 KB pages) gets a copy of its own in huge pages (core/huge_pages.h): bf16 decode
  // of a 0.5B model 1.29-1.42x. K-quants used in place are left mapped: their decode is compute
  // bound and a copy measured 0.90-1.04x (docs/kernels.md). True when it copied; false when the
  // weight is not dense, owns its bytes already, or is smaller than a huge page.
  bool copy_into_huge_pages();
  // A number no other Weight of this process has (copies made after the first call share it): a
  // backend that keeps its own copy of a weight knows it by this, never by an address that a later
  // weight may reuse.
  uint64_t uid() const;
  // The bytes a host product reads (bytes() of them): the dense values, the packed records or the
  // K-quant blocks. Null once released.
  const void* host_bytes() const;
  // For a backend that keeps a copy of its own, found by uid() (the GPU's): the host bytes go, a
  // heap copy freed once no other Weight shares it; shape, format and uid stay. A host product or
  // row afterwards fails naming why, instead of reading freed memory.
  void release_host_bytes();
  bool host_released() const { return host_released_; }

 private:
  void require_host() const;  // fails on a released weight
  uint8_t* allocate_owned(size_t bytes);  // sets owned_ and data_
  int64_t rows_ = 0, cols_ = 0;
  kernels::WType wt_ = kernels::WType::F32;
  const void* data_ = nullptr;
  std::shared_ptr<const void> owned_;  // set when converted or copied at load
  bool quantized_ = false;
  bool host_released_ = false;
  mutable uint64_t uid_ = 0;
  QuantMatrix q_;
  KQuantMatrix kq_;
};

// Called as a load reads a checkpoint's tensors or a backend copies the matrices: how many of how
// many are done (the CLI's progress line, the web UI's load progress).
using WeightsProgress = std::function<void(int64_t done, int64_t total)>;

// A model's matrix by its checkpoint name: what a backend that keeps its own copy of the weights
// (the GPU's) names them by in its cache file.
struct NamedWeight {
  std::string name;
  const Weight* weight = nullptr;
};

// A parameter (norm weights, biases) as f32, whatever the checkpoint stored (block formats
// dequantised, a transposed view put back in `shape` order).
std::vector<float> to_f32(const TensorView& t);
// For --quant q4k|q6k: throws, naming q8 and q4, unless every matrix width of the model (the
// values a K-quant row packs) is a multiple of 256. `widths` are the models' input dimensions.
void check_kquant_widths(WeightFormat fmt, const std::vector<int64_t>& widths, const std::string& what);

}  // namespace kvad
