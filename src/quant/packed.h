// kvad's quantised matrices: int8 (q8) or 4-bit (q4) codes with one f16 scale per 32 weights,
// stored in groups of 16 rows interleaved 4 bytes at a time. That is the order the integer dot
// product (VNNI vpdpbusd) consumes: one 64-byte load holds 4 consecutive inputs of 16 rows, so one
// instruction advances 16 output rows, and a 32-wide block needs 8 of them before its scale is
// applied once. GGUF's Q8_0 / Q4_0 blocks repack into this layout losslessly.
//
// Record of one (group of 16 rows, block of 32 columns), groups outermost, blocks inner:
//   q8: codes u8[8 steps][16 rows][4]  (= w/d + 128)          then d f16[16]            544 B
//   q4: codes u4[4 step pairs][16][4]  (low nibble: step 2p,  then d f16[16], m f16[16]  320 B
//                                        high nibble: step 2p+1)
// A weight is d * code + m, with m = -128 d for q8 (implied) and stored for q4.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvad {

enum class QKind { Q8, Q4 };

class QuantMatrix {
 public:
  static constexpr int kRows = 16;   // rows per group
  static constexpr int kBlock = 32;  // columns per scale

  QuantMatrix() = default;
  QKind kind() const { return kind_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t groups() const { return (rows_ + kRows - 1) / kRows; }
  int64_t blocks() const { return (cols_ + kBlock - 1) / kBlock; }
  static constexpr size_t record_bytes(QKind k) { return k == QKind::Q8 ? 544 : 320; }
  size_t bytes() const { return (size_t)(groups() * blocks()) * record_bytes(kind_); }
  const uint8_t* record(int64_t group, int64_t block) const {
    return data_ + (size_t)(group * blocks() + block) * record_bytes(kind_);
  }
  const uint8_t* data() const { return data_; }

  // Quantises rows of f32 (row-major [rows, cols]): per block, q8 d = max|w| / 127;
  // q4 d = (max - min) / 15, m = min.
  static QuantMatrix quantize(QKind kind, const float* w, int64_t rows, int64_t cols);
  // Wraps already-packed bytes (e.g. a memory-mapped cache file); `keep` keeps them alive.
  static QuantMatrix wrap(QKind kind, int64_t rows, int64_t cols, const uint8_t* data, std::shared_ptr<const void> keep);
  // Builds from the caller's per-row blocks: fill(row, block, codes[32], &d, &m) gives codes in
  // [0, 255] (q8, offset by 128) or [0, 15] (q4) and the block's d, m (m ignored for q8).
  template <typename Fill>
  static QuantMatrix build(QKind kind, int64_t rows, int64_t cols, Fill&& fill);

  // Dequantises one row into out[cols].
  void row(int64_t r, float* out) const;
  // Forgets the bytes (freed once nothing else keeps them); the shape and kind stay.
  void release_bytes() {
    data_ = nullptr;
    storage_.reset();
  }

 private:
  static QuantMatrix allocate(QKind kind, int64_t rows, int64_t cols);
  void put(int64_t r, int64_t b, const uint8_t* codes, float d, float m);

  QKind kind_ = QKind::Q8;
  int64_t rows_ = 0, cols_ = 0;
  const uint8_t* data_ = nullptr;
  std::shared_ptr<const void> storage_;
};

template <typename Fill>
QuantMatrix QuantMatrix::build(QKind kind, int64_t rows, int64_t cols, Fill&& fill) {
  QuantMatrix q = allocate(kind, rows, cols);
  uint8_t codes[kBlock];
  for (int64_t r = 0; r < rows; r++)
    for (int64_t b = 0; b < q.blocks(); b++) {
      float d = 0, m = 0;
      fill(r, b, codes, &d, &m);
      q.put(r, b, codes, d, m);
    }
  return q;
}

const char* qkind_name(QKind k);

}  // namespace kvad
