// The layers a UNet and a VAE are built from, on channels-last activation maps.
//
// Why channels last (NHWC) when diffusers is NCHW: a 3x3 convolution is then one matrix product
// whose rows are pixels (each row the k x k x C_in patch around a pixel, im2col) against the
// weight as [C_out, k*k*C_in], the [outputs, inputs] layout kvad's kernels take (kernels/gemm.h's
// packed panels for f32 / bf16, the int8 kernels for q8); and a spatial transformer's tokens are the map's
// rows as they lie, with no transpose in or out. The checkpoint's [C_out, C_in, kh, kw] weight is
// reordered once at load. Maps cross to NCHW only at the edges (goldens, latents given by a user).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/weight.h"
#include "io/checkpoint.h"
#include "kernels/gemm.h"

namespace kvad::image {

// Where a model's pieces of work run (the server hands each to its engine thread, so a language
// model's decode steps go on between the blocks of a UNet call); empty: on the calling thread.
// Everything that computes on the thread pool runs inside one.
using StageRunner = std::function<void(const std::function<void()>&)>;
inline void run_stage(const StageRunner& r, const std::function<void()>& work) { r ? r(work) : work(); }

// [n, h, w, c] f32, channels last.
struct Map {
  int64_t n = 0, h = 0, w = 0, c = 0;
  std::vector<float> v;

  Map() = default;
  Map(int64_t n_, int64_t h_, int64_t w_, int64_t c_) : n(n_), h(h_), w(w_), c(c_), v((size_t)(n_ * h_ * w_ * c_)) {}
  int64_t pixels() const { return n * h * w; }  // rows of the map as a matrix [pixels, c]
  float* at(int64_t b, int64_t y, int64_t x) { return v.data() + ((b * h + y) * w + x) * c; }
  const float* at(int64_t b, int64_t y, int64_t x) const { return v.data() + ((b * h + y) * w + x) * c; }
};

Map from_nchw(const float* x, int64_t n, int64_t c, int64_t h, int64_t w);
std::vector<float> to_nchw(const Map& m);

// A layer's matrix [out, in]: f32 and bf16 packed for kernels/gemm.h (the products here are over
// thousands of pixel rows), q8 as a Weight (kvad's int8 kernels).
struct LayerWeight {
  kernels::PackedWeight packed;  // f32 / bf16
  Weight q;                      // q8
  int64_t rows = 0, cols = 0;
  // y[n, rows] = x[n, cols] W^T
  void product(const float* x, int64_t n, float* y) const;
  static LayerWeight from_f32(const std::vector<float>& v, int64_t rows, int64_t cols, WeightFormat fmt);
};

// y = x W^T + b on rows (a transformer's projections, the time embedding's MLP).
struct Linear {
  LayerWeight w;          // [out, in]
  std::vector<float> b;   // [out] or empty
  int64_t in() const { return w.cols; }
  int64_t out() const { return w.rows; }
  // y[n, out] = x[n, in] W^T + b
  void apply(const float* x, int64_t n, float* y) const;
  // Several layers over the same input (q/k/v): a q8 group quantises the input once.
  static void apply_group(const float* x, int64_t n, std::initializer_list<std::pair<const Linear*, float*>> outs);
  // From "<name>.weight" [out, in] (and "<name>.bias" when `bias`); a 1x1 conv's [out, in, 1, 1]
  // weight reads as a linear layer too (SD 1.5's proj_in / proj_out).
  static Linear load(Checkpoint& ck, const std::string& name, int64_t out, int64_t in, bool bias,
                     WeightFormat fmt = WeightFormat::F32);
};

// 2-D convolution, square kernel, zero padding, stride 1 or 2, with bias (all of SD's convs).
struct Conv2d {
  int64_t cin = 0, cout = 0, k = 1, stride = 1, pad = 0;
  LayerWeight w;          // [cout, k*k*cin], patch order (ky, kx, ci): matches im2col below
  std::vector<float> b;  // [cout]
  Map apply(const Map& x) const;
  int64_t out_size(int64_t in) const { return (in + 2 * pad - k) / stride + 1; }
  // From "<name>.weight" [cout, cin, k, k] and "<name>.bias" [cout]; shapes checked.
  static Conv2d load(Checkpoint& ck, const std::string& name, int64_t cout, int64_t cin, int64_t k,
                     int64_t stride, int64_t pad, WeightFormat fmt = WeightFormat::F32);
};

// GroupNorm over channels-last maps: statistics per (image, group) over h*w*(c/groups) values
// (two passes in double: the mean first, then the variance around it), then the affine per channel;
// `then_silu` fuses the SiLU that follows every norm in a ResNet block. In place.
struct GroupNorm {
  int64_t groups = 32;
  double eps = 1e-5;
  std::vector<float> w, b;  // [c]
  void apply(Map& x, bool then_silu) const;
  static GroupNorm load(Checkpoint& ck, const std::string& name, int64_t c, int64_t groups, double eps);
};

// LayerNorm over each row of [n, c] (a transformer block's norms). In place.
struct LayerNorm {
  double eps = 1e-5;
  std::vector<float> w, b;
  void apply(float* x, int64_t n) const;
  static LayerNorm load(Checkpoint& ck, const std::string& name, int64_t c, double eps);
};

void silu(float* x, int64_t n);
// Nearest-neighbour upsampling by 2 in both directions (diffusers' Upsample2D before its conv).
Map upsample_nearest2x(const Map& x);

// Multi-head scaled dot-product attention, no mask, for one image of the batch:
// out[i, h*d:(h+1)*d] = softmax(q_i,h . k_j,h / sqrt(d)) v_j,h over j < n_kv.
// q [n_q, heads*d], k and v [n_kv, heads*d] with row strides q_stride / kv_stride (so q, k, v may
// be column slices of one fused [n, 3*heads*d] product); out [n_q, heads*d] contiguous.
// Runs on the pool over (head, block of queries); memory O(threads * n_kv), never n_q * n_kv.
// `bf16`: both products with bf16 operands (q, k, v and the softmax's numerators rounded to
// nearest even; each output row divided by its f32 sum) and f32 sums, as PyTorch's bf16
// attention rounds its operands. Where the CPU has no AVX512-BF16 it runs in f32.
void attention(const float* q, int64_t q_stride, const float* k, const float* v, int64_t kv_stride, int64_t n_q,
               int64_t n_kv, int64_t heads, int64_t d, float* out, bool bf16 = false);

}  // namespace kvad::image
