// core/cpu.h: the AMX tiles' first-use check runs in a child process, so what goes wrong there
// (a wrong result, a fault, a hang) is reported and the caller goes on.
#include <gtest/gtest.h>

#include <csignal>

#include "core/cpu.h"

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
  if (!cpu_features().amx_tile) EXPECT_FALSE(amx_enabled());
  if (!amx_enabled()) EXPECT_FALSE(amx_usable_for(true, "test", [] { return true; }));
  EXPECT_EQ(cpu_summary().find("amx") != std::string::npos, cpu_features().amx_tile) << cpu_summary();
}
