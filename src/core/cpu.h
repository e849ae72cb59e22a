// CPU features read once from CPUID. Kernels pick their instruction set from this at start-up, so
// one binary runs on any x86-64 (and builds elsewhere with the scalar paths only).
#pragma once
#include <string>

namespace kvad {

enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avx_vnni = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512vnni = false, avx512bf16 = false;
  int logical_cores = 1;
};

const CpuFeatures& cpu_features();
// The best ISA this CPU supports, lowered by KVAD_ISA=scalar|avx2|avx512 (for tests and comparison).
Isa best_isa();
const char* isa_name(Isa isa);
std::string cpu_summary();

}  // namespace kvad
