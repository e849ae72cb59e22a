// kvad devices: where a model can run (--device): the CPU, and each Vulkan device with its number.
#include <cstdio>

#include "cli/common.h"
#include "runtime/devices.h"

namespace kvad::cli {

void add_devices(CLI::App& app) {
  auto* cmd = app.add_subcommand("devices", "list the devices models can run on (--device cpu | gpu | gpu:N)");
  cmd->callback([] { std::fputs(describe_devices().c_str(), stdout); });
}

}  // namespace kvad::cli
