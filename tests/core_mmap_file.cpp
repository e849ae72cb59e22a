// MappedFile's two ways of holding a file: the same bytes either way, and huge pages only where
// they were asked for and the machine has them (its sysfs setting, read here on its own).
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mmap_file.h"
#include "test_support.h"

using namespace kvad;

namespace {

std::string write_random_file(const std::string& path, size_t bytes) {
  std::mt19937 rng(7);
  std::string data(bytes, '\0');
  for (char& c : data) c = (char)(rng() & 0xff);
  std::ofstream(path, std::ios::binary).write(data.data(), (std::streamsize)data.size());
  return data;
}

bool machine_has_huge_pages() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  return line.find("[always]") != std::string::npos || line.find("[madvise]") != std::string::npos;
}

}  // namespace

TEST(MappedFile, HugePagesHoldTheSameBytesAsTheMapping) {
  const std::string dir = test::temp_dir("mmap-file");
  for (size_t bytes : {size_t{1000}, (size_t{2} << 20) - 1, (size_t{5} << 20) + 12345}) {
    SCOPED_TRACE(bytes);
    const std::string path = dir + "/f" + std::to_string(bytes);
    const std::string data = write_random_file(path, bytes);
    MappedFile mapped(path), huge(path, Paging::HugePages);
    ASSERT_EQ(mapped.size(), bytes);
    ASSERT_EQ(huge.size(), bytes);
    EXPECT_EQ(std::string((const char*)mapped.data(), bytes), data);
    EXPECT_EQ(std::string((const char*)huge.data(), bytes), data);
    EXPECT_FALSE(mapped.in_huge_pages());
    // Under 2 MB a huge page would hold the file and more: it stays a mapping.
    EXPECT_EQ(huge.in_huge_pages(), bytes >= (size_t{2} << 20) && machine_has_huge_pages());
    if (huge.in_huge_pages()) {
      EXPECT_EQ((uintptr_t)huge.data() % (size_t{2} << 20), 0u) << "2 MB aligned";
    }
  }
  if (!machine_has_huge_pages()) GTEST_SKIP() << "SKIPPED in part: this machine's transparent huge pages are off";
}

TEST(MappedFile, AnEmptyOrMissingFile) {
  const std::string dir = test::temp_dir("mmap-file-empty");
  std::ofstream(dir + "/empty").flush();
  MappedFile empty(dir + "/empty", Paging::HugePages);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_FALSE(empty.in_huge_pages());
  EXPECT_THROW(MappedFile(dir + "/missing", Paging::HugePages), Error);
}
