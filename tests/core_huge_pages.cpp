// HugePageBuffer: zeroed, writable, 2 MB aligned, exactly its size, moved without a copy; and on a
// machine whose kernel gives huge pages on request, a touched buffer of whole huge pages gets them.
#include <gtest/gtest.h>

#include "core/huge_pages.h"
#include "resident_memory.h"

using namespace kvad;

using test::anon_huge_kb_at;

TEST(HugePageBuffer, ZeroedAlignedAndWritableToItsLastByte) {
  for (size_t bytes : {size_t{1}, size_t{4097}, HugePageBuffer::kHugePage, 3 * HugePageBuffer::kHugePage + 5}) {
    SCOPED_TRACE(bytes);
    HugePageBuffer buf(bytes);
    ASSERT_NE(buf.data(), nullptr);
    EXPECT_EQ(buf.size(), bytes);
    EXPECT_EQ((uintptr_t)buf.data() % HugePageBuffer::kHugePage, 0u);
    EXPECT_EQ(buf.data()[0], 0);
    EXPECT_EQ(buf.data()[bytes - 1], 0);
    buf.data()[bytes - 1] = 7;  // under ASan a short mapping would be a report here
    EXPECT_EQ(buf.data()[bytes - 1], 7);
  }
  HugePageBuffer empty(0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
}

TEST(HugePageBuffer, MovesOwnership) {
  HugePageBuffer a(4096);
  a.data()[10] = 42;
  uint8_t* p = a.data();
  HugePageBuffer b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), p);
  EXPECT_EQ(b.data()[10], 42);
  HugePageBuffer c(8192);
  c = std::move(b);  // c's own mapping is released, b's taken
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(c.size(), 4096u);
  EXPECT_EQ(b.data(), nullptr);
}

TEST(HugePageBuffer, GetsHugePagesWhereTheKernelGivesThem) {
  if (!transparent_huge_pages_enabled()) GTEST_SKIP() << "SKIPPED: this machine's transparent huge pages are off";
  HugePageBuffer buf(8 * HugePageBuffer::kHugePage);
  for (size_t i = 0; i < buf.size(); i += 4096) buf.data()[i] = 1;
  const long kb = anon_huge_kb_at(buf.data());
  if (kb == -1) GTEST_SKIP() << "SKIPPED: /proc/self/smaps has no AnonHugePages field here";
  // The kernel may fall back to small pages when it has no free 2 MB page; most of 16 MB should not.
  EXPECT_GE(kb, 8 * 1024) << "AnonHugePages of the buffer's mapping, kB";
}
