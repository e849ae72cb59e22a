#include "core/base64.h"

#include <cstdint>

namespace kvad {

std::string base64_encode(std::string_view bytes) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t n = (uint32_t)(uint8_t)bytes[i] << 16;
    if (i + 1 < bytes.size()) n |= (uint32_t)(uint8_t)bytes[i + 1] << 8;
    if (i + 2 < bytes.size()) n |= (uint32_t)(uint8_t)bytes[i + 2];
    out += k[(n >> 18) & 63];
    out += k[(n >> 12) & 63];
    out += i + 1 < bytes.size() ? k[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.size() ? k[n & 63] : '=';
  }
  return out;
}

}  // namespace kvad
