// Errors: every failure on bad input is an exception that names the file/field/request and what is
// wrong. They are caught at the boundary (CLI -> message + exit code; server -> JSON error + status).
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvad {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Overflow-checked arithmetic for sizes read from files.
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }
inline bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

}  // namespace kvad
