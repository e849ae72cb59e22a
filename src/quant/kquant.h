// ggml's K-quant matrices (Q4_K, Q5_K, Q6_K) in the block layout GGUF stores, used in place, and
// the activations they multiply: quantised per 256 values like llama.cpp's Q8_K, so the integer
// dot products are the ones llama.cpp computes.
//
// A row of `cols` values is cols/256 super-blocks (ggml-common.h; read from ggml-quants.c
// dequantize_row_q*_K, re-implemented here):
//   Q4_K 144 B: f16 d, f16 dmin, scales[12] (8 x (6-bit scale, 6-bit min)), qs[128] (4-bit)
//               w = d * sc[j] * q - dmin * m[j] over 8 sub-blocks of 32
//   Q5_K 176 B: as Q4_K plus qh[32] (the 5th bit)
//   Q6_K 210 B: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], f16 d
//               w = d * sc[j] * (q - 32) over 16 sub-blocks of 16
// In each 64-value chunk the low nibbles hold values 0..31 and the high nibbles 32..63 (Q6_K:
// per 128-value half, ql[l] / ql[l+32] low nibbles are values l / l+32, high nibbles l+64 / l+96).
//
// Also here: dequantising every ggml block format (for embeddings, norms and tests), and kvad's
// own quantisers to Q4_K / Q6_K for `--quant q4k|q6k` on Hugging Face checkpoints.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/cpu.h"
#include "core/dtype.h"

namespace kvad {

constexpr int64_t kQK = 256;  // values per K-quant super-block

class KQuantMatrix {
 public:
  KQuantMatrix() = default;
  // Views rows x cols of `type` blocks at `data` (rows stored one after another); `keep` keeps
  // them alive (may be null when the caller does).
  static KQuantMatrix wrap(DType type, int64_t rows, int64_t cols, const uint8_t* data, std::shared_ptr<const void> keep);
  // kvad's quantiser (Q4_K or Q6_K) of row-major f32 [rows, cols]; cols a multiple of 256.
  static KQuantMatrix quantize(DType type, const float* w, int64_t rows, int64_t cols);
  static bool supports(DType t) { return t == DType::Q4_K || t == DType::Q5_K || t == DType::Q6_K; }

  // A K-quant matrix (one whose bytes were released included; a default one is none).
  explicit operator bool() const { return rows_ > 0; }
  DType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t blocks() const { return cols_ / kQK; }  // super-blocks per row
  size_t row_bytes() const { return (size_t)blocks() * dtype_block_bytes(type_); }
  size_t bytes() const { return (size_t)rows_ * row_bytes(); }
  const uint8_t* row_data(int64_t r) const { return data_ + (size_t)r * row_bytes(); }
  // Dequantises one row into out[cols].
  void row(int64_t r, float* out) const;
  // Forgets the bytes (freed once nothing else keeps them); the shape and type stay.
  void release_bytes() {
    data_ = nullptr;
    storage_.reset();
  }

 private:
  DType type_ = DType::Q4_K;
  int64_t rows_ = 0, cols_ = 0;
  const uint8_t* data_ = nullptr;
  std::shared_ptr<const void> storage_;
};

// Activations as llama.cpp's block_q8_K, per token and per 256 inputs: d = max|x| / 127 (signed
// so that the largest magnitude maps to -127), q = round(x / d), and the sums of q per 16 (and
// per 32, which llama.cpp's Q4_K/Q5_K kernels add from them in every dot product).
struct KActs {
  int64_t n = 0, k = 0, blocks = 0;  // blocks = k / 256
  std::vector<int8_t> q;             // [n][k]
  std::vector<float> d;              // [n][blocks]
  std::vector<int16_t> bsums;        // [n][blocks][16]
  std::vector<int16_t> sums32;       // [n][blocks][8]: bsums in pairs, against Q4_K/Q5_K's mins
  const int8_t* codes(int64_t t, int64_t b) const { return q.data() + (t * blocks + b) * kQK; }
};
// k must be a multiple of 256.
void quantize_kacts(const float* x, int64_t n, int64_t k, KActs& out, Isa isa = best_isa());

// Dequantises n values of `type` blocks (n a multiple of the block size) into out[n].
void dequantize_blocks(DType type, const uint8_t* src, int64_t n, float* out);

// The 6-bit (scale, min) pairs of a Q4_K/Q5_K super-block (ggml's get_scale_min_k4), and back.
void kquant_unpack_scales(const uint8_t* packed12, uint8_t sc[8], uint8_t m[8]);
void kquant_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t packed12[12]);

}  // namespace kvad
