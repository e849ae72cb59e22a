// Encode throughput on a few MB of English-like text, printed for each fixture tokenizer (byte-level
// BPE, SentencePiece-style BPE, Unigram). The bound checked is loose (the machine may be busy); the
// printed figure is the measurement (docs/tokenizer.md has figures and the command).
// KVAD_BENCH_TEXT=/path/to/file.txt measures on that file instead of the generated text;
// KVAD_BENCH_BYTES=N generates N bytes instead of 4 MiB.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include "fixture_tokenizer.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

using namespace kvad;

namespace {

// Zipf-weighted common words, punctuation, numbers and paragraphs: roughly the statistics of prose.
std::string english_text(size_t bytes) {
  static const char* words[] = {
      "the", "of", "and", "to", "a", "in", "is", "it", "you", "that", "he", "was", "for", "on", "are", "with",
      "as", "I", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by", "not", "word",
      "but", "what", "some", "we", "can", "out", "other", "were", "all", "there", "when", "up", "use", "your",
      "how", "said", "an", "each", "she", "which", "do", "their", "time", "if", "will", "way", "about", "many",
      "then", "them", "write", "would", "like", "so", "these", "her", "long", "make", "thing", "see", "him",
      "two", "has", "look", "more", "day", "could", "go", "come", "did", "number", "sound", "no", "most",
      "people", "my", "over", "know", "water", "than", "call", "first", "who", "may", "down", "side", "been",
      "now", "find", "government", "understanding", "nevertheless", "particularly", "environmental",
      "responsibility", "international", "development", "information", "approximately", "characteristic",
      "don't", "it's", "we're", "they've", "I'll", "wouldn't", "London", "Tuesday", "September", "Einstein"};
  const size_t n = sizeof(words) / sizeof(words[0]);
  std::vector<double> w(n);
  for (size_t i = 0; i < n; i++) w[i] = 1.0 / (double)(i + 1);
  std::mt19937 rng(1234);
  std::discrete_distribution<size_t> pick(w.begin(), w.end());
  std::uniform_int_distribution<int> len(4, 24), pct(0, 99);
  std::string out;
  out.reserve(bytes + 256);
  while (out.size() < bytes) {
    int words_in_sentence = len(rng);
    for (int i = 0; i < words_in_sentence; i++) {
      std::string word = words[pick(rng)];
      if (i == 0) word[0] = (char)std::toupper((unsigned char)word[0]);
      out += word;
      int p = pct(rng);
      if (p < 6) out += ",";
      else if (p < 8) out += " " + std::to_string(rng() % 2000);
      if (i + 1 < words_in_sentence) out += " ";
    }
    out += pct(rng) < 85 ? ". " : "?\n\n";
  }
  return out;
}

TEST(TokenizerThroughput, EncodeEnglish) {
  std::string text;
  if (const char* path = std::getenv("KVAD_BENCH_TEXT")) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  } else {
    const char* bytes = std::getenv("KVAD_BENCH_BYTES");
    text = english_text(bytes ? std::strtoul(bytes, nullptr, 10) : 4 << 20);
  }
  for (const char* name : {"qwen3", "llama3", "gpt2", "llama2", "gemma3", "unigram"}) {
    auto t0 = std::chrono::steady_clock::now();
    Tokenizer tok = test::load_fixture_tokenizer(name);
    auto t1 = std::chrono::steady_clock::now();
    auto ids = tok.encode(text);  // cold: the word cache fills as it goes
    auto t2 = std::chrono::steady_clock::now();
    auto again = tok.encode(text);  // warm cache
    auto t3 = std::chrono::steady_clock::now();
    auto secs = [](auto a, auto b) { return std::chrono::duration<double>(b - a).count(); };
    double mb = (double)text.size() / 1e6;
    std::printf("[throughput] %-7s load %.2f s; encode %.1f MB -> %zu tokens: %.1f MB/s cold, %.1f MB/s warm\n", name,
                secs(t0, t1), mb, ids.size(), mb / secs(t1, t2), mb / secs(t2, t3));
    EXPECT_EQ(ids, again);
    EXPECT_GT(mb / secs(t1, t2), 0.5);
  }
}

}  // namespace
