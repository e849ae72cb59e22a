// The machine's memory as the kernel reports it (/proc/meminfo): what the trainer checks a run
// against and what kvad serve's default memory budget is taken from.
#pragma once
#include <cstdint>
#include <string>

namespace kvad {

// The value of `key` ("MemTotal", "MemAvailable") in bytes; 0 when unknown (not Linux).
uint64_t meminfo_bytes(const std::string& key);

}  // namespace kvad
