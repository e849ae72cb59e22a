// Dense matrix products in the layout checkpoints use: W is [m rows (outputs), k cols (inputs)],
// row-major, so y[t, r] = dot(x[t, :], W[r, :]). One token is the narrow case of a batch: with
// n = 1 it is a matrix-vector product, bound by reading W once.
#pragma once
#include <cstdint>

#include "core/cpu.h"

namespace kvad::kernels {

enum class WType { F32, BF16 };

// y[n, m] = x[n, k] * W[m, k]^T, on the process thread pool, with the kernel for `isa`.
void matmul(const float* x, int64_t n, int64_t k, const void* w, WType wt, int64_t m, float* y,
            Isa isa = best_isa());

// Several matrices over the same input in one parallel region (see qmatmul_multi).
void matmul_multi(const float* x, int64_t n, int64_t k, const void* const* w, const WType* wt, const int64_t* m,
                  float* const* y, int count, Isa isa = best_isa());

// y[i] = dot(x, W[row_begin + i]) for a range of rows, single-threaded (the pool's unit of work).
// bf16 prefill (`tokens` from kAmxBf16Tokens) on AVX-512 takes the AMX tiles where
// amx_bf16_rows_usable().
using RowsFn = void (*)(const float* x, int64_t n, int64_t k, const void* w, int64_t m, int64_t row_begin,
                        int64_t row_end, float* y);
RowsFn rows_kernel(WType wt, Isa isa, int64_t tokens = 1);
constexpr int64_t kAmxBf16Tokens = 16;
// amx_enabled() and amx_bf16 (core/cpu.h), and the tiles agreed with the AVX-512 kernel on a small
// ragged product at first use, and amx_allowed().
bool amx_bf16_rows_usable();

// y[n, m] = x[n, k] * B[k, m] with B row-major [k, m] (m contiguous), single-threaded: for a short
// k against a long m (attention scores of 40-160-wide heads against thousands of keys, with the
// keys transposed), where the dot-product kernels above would spend their time in horizontal sums.
void matmul_nn(const float* x, int64_t n, int64_t k, const float* b, int64_t m, float* y, Isa isa = best_isa());

// ISA variants (defined in matmul_<isa>.cpp). Scalar ones are the reference.
void rows_f32_scalar(const float*, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, float*);
void rows_bf16_scalar(const float*, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, float*);
void rows_f32_avx2(const float*, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, float*);
void rows_bf16_avx2(const float*, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, float*);
void rows_f32_avx512(const float*, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, float*);
void rows_bf16_avx512(const float*, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, float*);
// AMX-BF16 (matmul_amx.cpp): yᵀ = W · xᵀ with W's rows as A tiles in place, each activation split
// into three bf16 parts (f32's 24 bits); the emulated one runs over kernels/amx_tiles.h's model.
void rows_bf16_amx(const float*, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, float*);
void rows_bf16_amx_emulated(const float*, int64_t, int64_t, const void*, int64_t, int64_t, int64_t, float*);
void matmul_nn_scalar(const float* x, int64_t n, int64_t k, const float* b, int64_t m, float* y);
void matmul_nn_avx512(const float* x, int64_t n, int64_t k, const float* b, int64_t m, float* y);
void matmul_nn_avx2(const float* x, int64_t n, int64_t k, const float* b, int64_t m, float* y);

}  // namespace kvad::kernels
