// The kernel paths a product can take on this CPU, for tests that check each against a reference:
// the scalar one, AVX2, AVX-512 without BF16's instructions (what Ice Lake, Cascade Lake, Tiger
// Lake and Rocket Lake run: bf16 products as f32 products of widened bf16 values) and, where the
// CPU has them, AVX-512 with them. A path that needs more than the CPU has is left out (the first
// two are always listed where AVX2 / AVX-512 are).
#pragma once
#include <string>
#include <vector>

#include "core/cpu.h"

namespace kvad::test {

struct IsaPath {
  Isa isa;
  bool bf16;  // AVX512-BF16's instructions allowed
  std::string name;
};

inline std::vector<IsaPath> isa_paths() {
  std::vector<IsaPath> out = {{Isa::Scalar, false, "scalar"}};
  if (best_isa() >= Isa::Avx2) out.push_back({Isa::Avx2, false, "avx2"});
  if (best_isa() >= Isa::Avx512) out.push_back({Isa::Avx512, false, "avx512-nobf16"});
  set_avx512_bf16_allowed(true);  // what the CPU has, not what a test left switched
  if (avx512_bf16_enabled()) out.push_back({Isa::Avx512, true, "avx512"});
  return out;
}

// Runs its scope on a path's BF16 setting (set_avx512_bf16_allowed), allowed again after.
struct OnIsaPath {
  explicit OnIsaPath(const IsaPath& p) { set_avx512_bf16_allowed(p.bf16); }
  ~OnIsaPath() { set_avx512_bf16_allowed(true); }
  OnIsaPath(const OnIsaPath&) = delete;
  OnIsaPath& operator=(const OnIsaPath&) = delete;
};

}  // namespace kvad::test
