// File helpers. Writes that matter go through atomic_write_file: temp name, fsync, rename.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

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
// Writes the folder `dir` whole: `fill(tmp)` writes its files into the sibling ".NAME.tmp-PID",
// which is fsynced and swapped in with one rename (renameat2 RENAME_EXCHANGE over an existing
// folder, which is then removed), so a crash leaves the old folder or the new one, never a mix.
// When fill or the swap throws, the temporary is removed and `dir` is as it was. A temporary of a
// process that died mid-save is train::remove_stale_temporaries' to clear (same naming).
void write_directory_atomically(const std::string& dir, const std::function<void(const std::string& tmp)>& fill);
void make_directories(const std::string& path);
std::string join_path(const std::string& a, const std::string& b);

// What identifies files' contents cheaply, for a cache's stamp: [{name (the file name), size,
// mtime_ns}] in the given order (zeros for a file that cannot be stat'ed).
Json file_stamps(const std::vector<std::string>& paths);

}  // namespace kvad
