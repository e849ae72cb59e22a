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
  // AMX: the CPU has the tiles (CPUID) and the OS saves their state (XCR0 bits 17-18). Using them
  // also needs the kernel's per-process permission: amx_enabled().
  bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
  // AMD Zen 4 (vendor AMD, CPUID family 0x19 with AVX-512; Zen 3 has none): a few kernels choose
  // differently there (kernels/matmul_avx512.cpp's bf16 decode).
  bool zen4 = false;
  int logical_cores = 1;
};

const CpuFeatures& cpu_features();
// The best ISA this CPU supports, lowered by KVAD_ISA=scalar|avx2|avx2-vnni|avx512-novnni|avx512-nobf16|
// avx512|amx (for tests and comparison). Avx512 needs F, BW, VL and DQ (Skylake-SP/X, and every
// AVX-512 CPU since); VNNI and BF16 are features within it (avx512_vnni_enabled(),
// avx512_bf16_enabled()).
Isa best_isa();
// AVX512-VNNI's vpdpbusd may be used: the ISA is AVX-512, the CPU has it (Cascade Lake, Ice Lake,
// Tiger/Rocket Lake, Zen 4 and later) and KVAD_ISA is not "avx512-novnni". Without it (Skylake-SP/X)
// the integer products take AVX-512 kernels with vpmaddubsw / vpmaddwd sums (the same bits), and
// files *_avx512vnni.cpp are not run.
bool avx512_vnni_enabled();
// For tests and benchmarks that compare both paths in one process (like set_avx512_bf16_allowed);
// BF16 and AMX keep what the CPU has.
void set_avx512_vnni_allowed(bool allowed);
// AVX512-BF16's instructions (vdpbf16ps, vcvtne2ps2bf16) may be used: the ISA is AVX-512, the CPU
// has them (Zen 4 and later, Cooper Lake, Sapphire Rapids and later), KVAD_ISA is not
// "avx512-nobf16" or "avx512-novnni", and set_avx512_bf16_allowed(false) has not turned them off.
// Without them the AVX-512 kernels stay (files *_avx512.cpp are compiled without BF16); the few
// that multiply in bf16 (*_avx512bf16.cpp) give way to f32 products of the same bf16 values.
bool avx512_bf16_enabled();
// For tests and benchmarks that compare both paths in one process (like set_amx_allowed).
void set_avx512_bf16_allowed(bool allowed);
// A kernel asked to run at `isa` may use BF16's instructions (the dispatchers' one rule).
inline bool bf16_products(Isa isa) { return isa == Isa::Avx512 && avx512_bf16_enabled(); }
// AVX-VNNI's 256-bit vpdpbusd may be used by the AVX2 kernels: the ISA is AVX2 (an AVX-512 CPU
// takes the AVX-512 kernels), the CPU has it (Alder Lake and later Intel cores without AVX-512),
// and KVAD_ISA is not "avx2", which names plain AVX2 (Haswell to Zen 3); "avx2-vnni" asks for it.
bool avx_vnni_enabled();
// The AMX tiles may be used: the CPU has them, KVAD_ISA does not ask for less than "amx", the
// ISA is AVX-512 (the tiles' results are scaled with it), and Linux granted this process the tile
// state (arch_prctl ARCH_REQ_XCOMP_PERM, asked once; a refusal is not an error, the vector kernels
// stay). Each kernel also needs its own feature (amx_int8, amx_bf16) and checks its results once
// before taking the tiles (kernels/qmatmul.h, kernels/gemm.h).
bool amx_enabled();
// Whether the kernels may take the tiles now (default yes; amx_enabled() still decides): off, the
// same process runs AVX-512's vector kernels, for benchmarks that compare the two side by side
// (bench/micro.cpp, isa argument 3).
void set_amx_allowed(bool allowed);
bool amx_allowed();
// KVAD_AMX_EMULATE=1: on an AVX-512 CPU without tiles, amx_enabled() and the kernels run over the
// software model of the tiles (kernels/amx_tiles.h), so a test can take every AMX path end to end
// here (tests/cli_amx.cpp). Slow; prints a note per kernel family it takes.
bool amx_emulated();
// For a kernel's first use: amx_enabled(), the kernel's own `feature`, and `agrees()` (its tiles
// reproduce its vector kernel on a small product). A disagreement prints a warning naming the
// `products` and keeps the vector kernel. Call once, from a function-local static.
bool amx_usable_for(bool feature, const char* products, bool (*agrees)());
// The tile kernels were written and tested on CPUs without tiles (over kernels/amx_tiles.h's
// model), so amx_usable_for runs `check` in a child process (Linux): a fault or a hang there
// costs the tiles, not the user's process. "" when it returned true, else what went wrong. The
// child has only this thread: the pool's regions run inline there.
std::string first_run_failure(bool (*check)(), int timeout_s);
const char* isa_name(Isa isa);
std::string cpu_summary();

}  // namespace kvad
