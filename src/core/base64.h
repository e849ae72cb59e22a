// Base64 (RFC 4648, with padding): embeddings' base64 encoding_format, images' b64_json.
#pragma once
#include <string>
#include <string_view>

namespace kvad {

std::string base64_encode(std::string_view bytes);

}  // namespace kvad
