// The web UI's files (web/*), compiled into the binary by CMake (embed/web.S + web_index.cpp) so
// `kvad serve` needs no files at run time.
#pragma once
#include <cstddef>
#include <string>

namespace kvad::serve {

struct WebAsset {
  const char* name;  // file name under web/, e.g. "index.html"
  const unsigned char* begin;
  const unsigned char* end;
};

// All embedded files; *n receives their count.
const WebAsset* web_assets(size_t* n);
const WebAsset* find_web_asset(const std::string& name);

}  // namespace kvad::serve
