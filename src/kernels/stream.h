// A plain streaming read of memory, the reference decode is measured against: each decode step
// reads every weight once, so bytes per token / this rate is the fastest decode can be.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/cpu.h"

namespace kvad::kernels {

// Reads bytes [0, n) (n a multiple of 256) with the widest loads the ISA has; returns a checksum
// so the reads cannot be optimised away.
uint64_t stream_read(const uint8_t* p, size_t n, Isa isa = best_isa());
// The same over the pool: each thread reads its contiguous share (cut at 256 bytes), as a decode
// step's threads read theirs of a matrix; the checksum of all shares.
uint64_t stream_read_threads(const uint8_t* p, size_t n, Isa isa = best_isa());
uint64_t stream_read_avx512(const uint8_t* p, size_t n);
uint64_t stream_read_avx2(const uint8_t* p, size_t n);

}  // namespace kvad::kernels
