// The tokenizers under tests/fixtures/tokenizers/<name>, as the tokenizer tests load them: the
// files as they are, or unpacked where they are kept gzipped (gemma3: 33 MB as text).
#pragma once
#include <filesystem>
#include <string>

#include "core/json.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace kvad::test {

inline Tokenizer load_fixture_tokenizer(const std::string& name) {
  std::string dir = source_path("tests/fixtures/tokenizers/" + name);
  if (!std::filesystem::exists(dir + "/tokenizer.json.gz"))
    return Tokenizer::load(dir + "/tokenizer.json", dir + "/tokenizer_config.json");
  // The text as kvad reads a tokenizer.json file (its vocab and merges straight into tables).
  Json tc = Json::parse(read_gzip_file(dir + "/tokenizer_config.json.gz"));
  return Tokenizer::parse(read_gzip_file(dir + "/tokenizer.json.gz"), tc, dir + "/tokenizer.json");
}

}  // namespace kvad::test
