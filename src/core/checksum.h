// XXH64 (Yann Collet's xxHash, 64-bit variant, per its public specification): a fast checksum for
// detecting corruption of files kvad writes itself (the .nq cache). Not a cryptographic hash: it
// catches bit rot, torn and truncated writes, not a deliberate forgery (whoever can write the
// cache can write its checksums too).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvad {

uint64_t xxh64(const void* data, size_t size, uint64_t seed = 0);
std::string hex64(uint64_t v);  // 16 lower-case hex digits

}  // namespace kvad
