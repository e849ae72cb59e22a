// core/cpu.h: the AMX tiles' first-use check runs in a child process, so what goes wrong there
// (a wrong result, a fault, a hang) is reported and the caller goes on.
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <string>

#include "core/cpu.h"
#include "core/threads.h"

using namespace kvad;

TEST(CpuFirstRun, AGoodCheckPasses) { EXPECT_EQ(first_run_failure([] { return true; }, 10), ""); }

TEST(CpuFirstRun, WrongResultsAreReported) {
  EXPECT_EQ(first_run_failure([] { return false; }, 10), "gave different results");
}

TEST(CpuFirstRun, AFaultIsReportedAndThisProcessGoesOn) {
  const std::string why = first_run_failure(
      [] {
        std::raise(SIGILL);  // what a tile instruction without the OS's permission gets
        return true;
      },
      10);
  EXPECT_NE(why.find("stopped with"), std::string::npos) << why;
  EXPECT_NE(why.find("Illegal instruction"), std::string::npos) << why;
}

TEST(CpuFirstRun, TheThreadPoolRunsInlineInTheChild) {
  // The child has only the forking thread: a region waiting for the pool's workers would hang
  // (the K-quant check's quantiser did, found through KVAD_AMX_EMULATE).
  if (pool().size() < 2) set_threads(2);
  EXPECT_EQ(first_run_failure(
                [] {
                  std::atomic<int64_t> sum{0};
                  pool().parallel_for(1000, 1, [&](int64_t b, int64_t e) { sum += e - b; });
                  pool().parallel_for_balanced(1000, 10, [&](int64_t b, int64_t e) { sum += e - b; });
                  return sum == 2000;
                },
                10),
            "");
}

TEST(CpuFirstRun, AHangIsCutOff) {
  const std::string why = first_run_failure(
      [] {
        for (volatile bool forever = true; forever;) {
        }
        return true;
      },
      1);
  EXPECT_EQ(why, "did not finish in 1 s");
}

TEST(Cpu, AmxIsOnlyEnabledWhereTheCpuHasTiles) {
  // On a CPU without tiles nothing asks Linux for them, and no kernel takes them.
  if (!cpu_features().amx_tile) {
    EXPECT_FALSE(amx_enabled());
  }
  if (!amx_enabled()) {
    EXPECT_FALSE(amx_usable_for(true, "test", [] { return true; }));
  }
  EXPECT_EQ(cpu_summary().find("amx") != std::string::npos, cpu_features().amx_tile) << cpu_summary();
}

// Zen 4 as the kernels see it (CPUID vendor and family) against what Linux reports in
// /proc/cpuinfo: AuthenticAMD, cpu family 25, avx512f.
TEST(Cpu, Zen4IsWhatTheKernelSaysItIs) {
  std::ifstream in("/proc/cpuinfo");
  if (!in) GTEST_SKIP() << "SKIPPED: no /proc/cpuinfo here";
  std::string line, vendor, family;
  bool avx512f = false;
  while (std::getline(in, line) && !line.empty()) {  // the first processor's block
    auto value = [&] { return line.substr(line.find(':') + 2); };
    if (line.rfind("vendor_id", 0) == 0) vendor = value();
    if (line.rfind("cpu family", 0) == 0) family = value();
    if (line.rfind("flags", 0) == 0) avx512f = (" " + value() + " ").find(" avx512f ") != std::string::npos;
  }
  if (vendor.empty()) GTEST_SKIP() << "SKIPPED: /proc/cpuinfo names no x86 vendor (not an x86 CPU)";
  EXPECT_EQ(cpu_features().zen4, vendor == "AuthenticAMD" && family == "25" && avx512f)
      << vendor << ", family " << family << (avx512f ? ", avx512f" : "");
}

// Whether AVX512-BF16's instructions are used is a switch within the AVX-512 kernels (Ice Lake and
// Cascade Lake have AVX-512 VNNI without BF16): the summary names it, and AMX, whose kernels lean
// on it, is never enabled without it.
TEST(Cpu, Bf16ProductsAreAFeatureOfTheAvx512Level) {
  const CpuFeatures& f = cpu_features();
  if (best_isa() < Isa::Avx512) {
    EXPECT_FALSE(avx512_bf16_enabled());
    GTEST_SKIP() << "SKIPPED: no AVX-512 here (" << cpu_summary() << "); AVX512-BF16 checked off";
  }
  EXPECT_TRUE(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq);
  EXPECT_FALSE(avx_vnni_enabled());  // AVX-VNNI is the AVX2 kernels' feature; AVX-512's are taken here
  const char* isa = std::getenv("KVAD_ISA");
  const bool no_vnni = isa && std::string(isa) == "avx512-novnni";
  EXPECT_EQ(avx512_bf16_enabled(), f.avx512bf16 && !no_vnni && !(isa && std::string(isa) == "avx512-nobf16")) << cpu_summary();
  if (!f.avx512bf16) {
    EXPECT_FALSE(amx_enabled());
  }
  if (!avx512_bf16_enabled()) GTEST_SKIP() << "SKIPPED: AVX512-BF16 not in use (" << cpu_summary() << ")";
  EXPECT_NE(cpu_summary().find(" bf16)"), std::string::npos) << cpu_summary();
  set_avx512_bf16_allowed(false);
  const bool off = avx512_bf16_enabled();
  const std::string summary = cpu_summary();
  set_avx512_bf16_allowed(true);
  EXPECT_FALSE(off);
  EXPECT_NE(summary.find("bf16 unused"), std::string::npos) << summary;
  EXPECT_TRUE(avx512_bf16_enabled());
}

// VNNI is a feature within the AVX-512 level (Skylake-SP/X has AVX-512 without it): KVAD_ISA=
// avx512-novnni turns it off with BF16 and AMX (no CPU has those without it), and the switch for
// tests turns off VNNI alone.
TEST(Cpu, VnniIsAFeatureOfTheAvx512Level) {
  const CpuFeatures& f = cpu_features();
  if (best_isa() < Isa::Avx512) {
    EXPECT_FALSE(avx512_vnni_enabled());
    GTEST_SKIP() << "SKIPPED: no AVX-512 here (" << cpu_summary() << "); AVX512-VNNI checked off";
  }
  const char* isa = std::getenv("KVAD_ISA");
  const bool no_vnni = isa && std::string(isa) == "avx512-novnni";
  EXPECT_EQ(avx512_vnni_enabled(), f.avx512vnni && !no_vnni) << cpu_summary();
  if (!avx512_vnni_enabled()) {
    EXPECT_FALSE(avx512_bf16_enabled());
    EXPECT_FALSE(amx_enabled());
    EXPECT_NE(cpu_summary().find(f.avx512vnni ? "(avx512-vnni unused" : "(avx512 without vnni"), std::string::npos) << cpu_summary();
    GTEST_SKIP() << "SKIPPED: AVX512-VNNI not in use (" << cpu_summary() << ")";
  }
  const bool bf16 = avx512_bf16_enabled();
  set_avx512_vnni_allowed(false);
  const bool off = avx512_vnni_enabled(), bf16_then = avx512_bf16_enabled();
  set_avx512_vnni_allowed(true);
  EXPECT_FALSE(off);
  EXPECT_EQ(bf16_then, bf16);
  EXPECT_TRUE(avx512_vnni_enabled());
}
