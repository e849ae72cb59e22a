// The backend's scratch arena (backend/arena.h): what a forward allocates, the next forward finds
// again in the same place, and an operation's own scratch is reused by the next operation.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/arena.h"

namespace kvad {
namespace {

// One "forward": allocations of these sizes (floats), in order.
std::vector<float*> run_forward(Arena& a, const std::vector<size_t>& sizes) {
  a.reset();
  std::vector<float*> got;
  for (size_t n : sizes) {
    float* p = a.floats(n);
    EXPECT_EQ((uintptr_t)p % 64, 0u) << n << " floats";
    for (size_t i = 0; i < n; i++) p[i] = (float)i;  // every byte handed out is writable (ASan checks the bounds)
    got.push_back(p);
  }
  return got;
}

TEST(Arena, TheSecondForwardReusesTheFirstsMemoryWithoutANewChunk) {
  // Sizes that overflow the first chunk (64k floats) several times, as a prefill's layers do.
  const std::vector<size_t> sizes = {1000, 70000, 5, 300000, 64, 1 << 20, 17, 250000};
  Arena a;
  const std::vector<float*> first = run_forward(a, sizes);
  const size_t chunks = a.chunks(), bytes = a.capacity_bytes();
  for (int forward = 0; forward < 3; forward++) {
    EXPECT_EQ(run_forward(a, sizes), first) << "forward " << forward + 2;
    EXPECT_EQ(a.chunks(), chunks);
    EXPECT_EQ(a.capacity_bytes(), bytes);
  }
  // A smaller forward fits in what is there. Each new chunk is at least the others together
  // (few chunks for a growing prompt), and what they hold stays within a few times what was asked.
  run_forward(a, {10, 20});
  EXPECT_EQ(a.chunks(), chunks);
  size_t asked = 0;
  for (size_t n : sizes) asked += n * sizeof(float);
  EXPECT_LE(bytes, 4 * asked);
}

TEST(Arena, DistinctAllocationsDoNotOverlap) {
  Arena a;
  const std::vector<size_t> sizes = {3, 16, 65536, 1, 100000, 7};
  const std::vector<float*> p = run_forward(a, sizes);
  for (size_t i = 0; i < p.size(); i++)
    for (size_t j = 0; j < p.size(); j++)
      if (i != j) {
        EXPECT_TRUE(p[i] + sizes[i] <= p[j] || p[j] + sizes[j] <= p[i]) << i << " and " << j;
      }
}

TEST(Arena, AScopeHandsItsScratchToTheNextOperation) {
  Arena a;
  a.reset();
  float* output = a.floats(4096);  // an operation's output: allocated before its scope
  float* scratch = nullptr;
  {
    const Arena::Scope scope(a);
    scratch = a.floats(200000);  // past the first chunk: the scope spans two chunks
    a.floats(100);
  }
  float* next = a.floats(200000);
  EXPECT_EQ(next, scratch);
  EXPECT_NE(next, output);
  EXPECT_TRUE(next >= output + 4096 || next + 200000 <= output);
}

}  // namespace
}  // namespace kvad
