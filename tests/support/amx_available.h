// Why a test of the real AMX tiles cannot run here ("" when it can): the tests say so as their
// skip reason, never pass silently (issue 18).
#pragma once
#include <string>

#include "core/cpu.h"

namespace kvad::test {

inline std::string amx_unavailable(bool feature, const char* tiles) {
  if (!feature)
    return std::string("this CPU has no AMX ") + tiles + " tiles (lscpu | grep amx is empty; " + cpu_summary() +
           "): the tile instructions were not run";
  // Under the model the kernels dispatch to it, and the tile state was never asked of Linux.
  if (amx_emulated()) return "KVAD_AMX_EMULATE is set: this run tests the tiles' software model, not the hardware";
  if (!amx_enabled()) return "AMX is here but not enabled: KVAD_ISA asks for less, or Linux refused the tile state";
  return "";
}

}  // namespace kvad::test
