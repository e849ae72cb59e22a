// File helpers. Writes that matter go through atomic_write_file: temp name, fsync, rename.
#pragma once
#include <string>
#include <string_view>

namespace kvad {

std::string read_file(const std::string& path);
bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
// Writes to "<path>.tmp.<pid>", fsyncs it, renames it over path and fsyncs the directory.
void atomic_write_file(const std::string& path, std::string_view bytes);
// The same, streamed: write() pieces, then commit(). Destroyed without commit() -> temp removed.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  void write(std::string_view bytes);
  void commit();

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// Removes "<path>.tmp.<pid>" files (AtomicFile's temporaries) whose writer is gone: a writer
// killed mid-write (kill -9, power loss) leaves one behind, and nothing else would ever delete
// it. A temp of a live process (this one included) is kept. Returns how many were removed.
size_t remove_stale_temp_files(const std::string& path);

void fsync_directory(const std::string& dir);
void make_directories(const std::string& path);
std::string join_path(const std::string& a, const std::string& b);

}  // namespace kvad
