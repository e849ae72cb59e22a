#include "core/cpu.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "core/threads.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if defined(__linux__)
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

namespace kvad {

static CpuFeatures detect() {
  CpuFeatures f;
  f.logical_cores = (int)std::thread::hardware_concurrency();
  if (f.logical_cores < 1) f.logical_cores = 1;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = c & (1u << 27);
  f.fma = c & (1u << 12);
  f.f16c = c & (1u << 29);
  unsigned long long xcr0 = 0;
  if (osxsave) {
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = ((unsigned long long)hi << 32) | lo;
  }
  bool ymm_ok = (xcr0 & 0x6) == 0x6;
  bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
  const unsigned base_family = (a >> 8) & 0xF;  // leaf 1's EAX; 0xF: add the extended family
  const unsigned family = base_family == 0xF ? base_family + ((a >> 20) & 0xFF) : base_family;
  unsigned max_leaf = 0, vendor[3] = {0, 0, 0};
  __cpuid(0, max_leaf, vendor[0], vendor[2], vendor[1]);  // "AuthenticAMD" in EBX, EDX, ECX
  const bool amd = std::memcmp(vendor, "AuthenticAMD", 12) == 0;
  if (max_leaf < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = ymm_ok && (b & (1u << 5));
  f.avx512f = zmm_ok && (b & (1u << 16));
  f.avx512dq = zmm_ok && (b & (1u << 17));
  f.avx512bw = zmm_ok && (b & (1u << 30));
  f.avx512vl = zmm_ok && (b & (1u << 31));
  f.avx512vnni = zmm_ok && (c & (1u << 11));
  const bool tiles_ok = (xcr0 & (3ull << 17)) == (3ull << 17);  // XTILECFG and XTILEDATA
  f.amx_bf16 = tiles_ok && (d & (1u << 22));
  f.amx_tile = tiles_ok && (d & (1u << 24));
  f.amx_int8 = tiles_ok && (d & (1u << 25));
  __cpuid_count(7, 1, a, b, c, d);
  f.avx_vnni = ymm_ok && (a & (1u << 4));
  f.avx512bf16 = zmm_ok && (a & (1u << 5));
  f.zen4 = amd && family == 0x19 && f.avx512f;
  if (!ymm_ok) f.fma = f.f16c = false;
#endif
  return f;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

// KVAD_ISA when it names a level kvad knows, else nullptr; an unknown value is said once.
static const char* isa_env() {
  static const char* const value = []() -> const char* {
    const char* env = std::getenv("KVAD_ISA");
    if (!env || !*env) return nullptr;
    for (const char* known : {"scalar", "avx2", "avx2-vnni", "avx512-novnni", "avx512-nobf16", "avx512", "amx"})
      if (!std::strcmp(env, known)) return env;
    std::fprintf(stderr, "warning: KVAD_ISA=%s is not one of scalar, avx2, avx2-vnni, avx512-novnni, avx512-nobf16, "
                         "avx512, amx; ignored\n", env);
    return nullptr;
  }();
  return value;
}

Isa best_isa() {
  static const Isa isa = [] {
    const CpuFeatures& f = cpu_features();
    Isa best = Isa::Scalar;
    if (f.avx2 && f.fma && f.f16c) best = Isa::Avx2;
    if (best == Isa::Avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq) best = Isa::Avx512;
    if (const char* env = isa_env()) {
      const std::string v = env;
      Isa want = v == "scalar" ? Isa::Scalar : v == "avx2" || v == "avx2-vnni" ? Isa::Avx2 : Isa::Avx512;
      if (want < best) best = want;
    }
    return best;
  }();
  return isa;
}

bool avx_vnni_enabled() {
  static const bool enabled = [] {
    const char* env = isa_env();
    return best_isa() == Isa::Avx2 && cpu_features().avx_vnni && !(env && !std::strcmp(env, "avx2"));
  }();
  return enabled;
}

// The CPU has VNNI and KVAD_ISA leaves it: what avx512_vnni_enabled() says unless a test switched it off.
static bool avx512_vnni_available() {
  static const bool available = [] {
    const char* env = isa_env();
    return best_isa() == Isa::Avx512 && cpu_features().avx512vnni && !(env && !std::strcmp(env, "avx512-novnni"));
  }();
  return available;
}

static std::atomic<bool> g_avx512_vnni_allowed{true};
void set_avx512_vnni_allowed(bool allowed) { g_avx512_vnni_allowed.store(allowed, std::memory_order_relaxed); }
bool avx512_vnni_enabled() { return avx512_vnni_available() && g_avx512_vnni_allowed.load(std::memory_order_relaxed); }

static std::atomic<bool> g_avx512_bf16_allowed{true};
void set_avx512_bf16_allowed(bool allowed) { g_avx512_bf16_allowed.store(allowed, std::memory_order_relaxed); }

bool avx512_bf16_enabled() {
  static const bool available = [] {
    const char* env = isa_env();
    // No CPU has BF16 without VNNI: "avx512-novnni" (a Skylake-SP) turns both off.
    return avx512_vnni_available() && cpu_features().avx512bf16 && !(env && !std::strcmp(env, "avx512-nobf16"));
  }();
  return available && g_avx512_bf16_allowed.load(std::memory_order_relaxed);
}

// Linux (5.16 on) keeps the 8 KB tile state out of a process's signal frames and context switches
// until the process asks for it; the first tile instruction without permission is a SIGILL.
static bool request_tile_permission() {
#if defined(__linux__) && defined(__x86_64__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

bool amx_emulated() {
  static const bool emulated = [] {
    const char* v = std::getenv("KVAD_AMX_EMULATE");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return emulated;
}

bool amx_enabled() {
  static const bool enabled = [] {
    const CpuFeatures& f = cpu_features();
    // The tiles' results are checked against, and scaled with, AVX-512 kernels that use BF16 (every
    // AMX CPU has it).
    if (best_isa() != Isa::Avx512 || !f.avx512bf16 || !avx512_vnni_available()) return false;
    const char* env = isa_env();
    if (env && std::strcmp(env, "amx") != 0) return false;  // asked for a lower ISA
    if (amx_emulated()) return true;
    return f.amx_tile && request_tile_permission();
  }();
  return enabled;
}

static std::atomic<bool> g_amx_allowed{true};
void set_amx_allowed(bool allowed) { g_amx_allowed.store(allowed, std::memory_order_relaxed); }
bool amx_allowed() { return g_amx_allowed.load(std::memory_order_relaxed); }

std::string first_run_failure(bool (*check)(), int timeout_s) {
#if defined(__linux__)
  const pid_t pid = fork();
  if (pid == 0) {
    ThreadPool::run_inline_on_this_thread();  // the pool's workers stayed in the parent
    alarm((unsigned)timeout_s);
    _exit(check() ? 0 : 1);
  }
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid) {
    if (WIFSIGNALED(status))
      return WTERMSIG(status) == SIGALRM ? "did not finish in " + std::to_string(timeout_s) + " s"
                                         : std::string("stopped with ") + strsignal(WTERMSIG(status));
    return WEXITSTATUS(status) == 0 ? "" : "gave different results";
  }
#endif
  (void)timeout_s;
  return check() ? "" : "gave different results";  // no child process: checked here
}

bool amx_usable_for(bool feature, const char* products, bool (*agrees)()) {
  if (!amx_enabled() || !(feature || amx_emulated())) return false;
  const std::string failure = first_run_failure(agrees, amx_emulated() ? 60 : 10);
  if (failure.empty()) {
    if (amx_emulated())
      std::fprintf(stderr, "kvad: note: %s products on a software model of the AMX tiles (KVAD_AMX_EMULATE: for tests, slow)\n",
                   products);
    return true;
  }
  std::fprintf(stderr,
               "kvad: warning: the AMX tiles' %s products %s in their first-use check against the AVX-512 "
               "kernels on this CPU (%s); they stay on AVX-512. Please report it.\n",
               products, failure.c_str(), cpu_summary().c_str());
  return false;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "scalar";
  }
}

std::string cpu_summary() {
  const CpuFeatures& f = cpu_features();
  std::string s = std::to_string(f.logical_cores) + " cores, kernels " + isa_name(best_isa());
  if (f.avx512vnni) s += avx512_vnni_available() || best_isa() < Isa::Avx512 ? " (avx512-vnni" : " (avx512-vnni unused";
  else if (f.avx512f) s += " (avx512 without vnni";
  else if (f.avx2) s += " (avx2";
  else s += " (";
  if (avx_vnni_enabled()) s += " avx-vnni";
  if (avx512_bf16_enabled()) s += " bf16";
  else if (f.avx512bf16 && best_isa() == Isa::Avx512) s += " bf16 unused";
  if (amx_emulated() && amx_enabled()) s += " amx emulated";
  else if (f.amx_tile) s += amx_enabled() ? " amx" : " amx unused";
  s += ")";
  return s;
}

}  // namespace kvad
