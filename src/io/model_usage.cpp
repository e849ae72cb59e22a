#include "io/model_usage.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <ctime>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/store.h"

namespace kvad {

namespace {

std::map<std::string, int64_t> parse(const std::string& path) {
  std::map<std::string, int64_t> out;
  if (!file_exists(path)) return out;
  try {
    Json j = read_json_file(path);
    if (j.is_object())
      for (auto it = j.begin(); it != j.end(); ++it)
        if (it->is_number_integer()) out[it.key()] = it->get<int64_t>();
  } catch (const Error&) {
    // a damaged file is replaced on the next write
  }
  return out;
}

// Read-modify-write under a lock, so two kvad processes do not lose each other's entries.
template <typename F>
void update(F&& change) {
  try {
    std::string path = model_usage_path();
    make_directories(kvad_home());
    int fd = ::open((path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    ::flock(fd, LOCK_EX);
    try {
      auto m = parse(path);
      change(m);
      Json j = Json::object();
      for (auto& [k, v] : m) j[k] = v;
      atomic_write_file(path, j.dump(1) + "\n");
    } catch (const Error&) {
    }
    ::flock(fd, LOCK_UN);
    ::close(fd);
  } catch (const Error&) {
  }
}

}  // namespace

std::string model_usage_path() { return join_path(kvad_home(), "last_used.json"); }

void record_model_use(const std::string& key) {
  if (key.empty()) return;
  update([&](std::map<std::string, int64_t>& m) { m[key] = (int64_t)std::time(nullptr); });
}

std::map<std::string, int64_t> read_model_use() {
  try {
    return parse(model_usage_path());
  } catch (const Error&) {
    return {};
  }
}

void forget_model_use(const std::string& key) {
  update([&](std::map<std::string, int64_t>& m) { m.erase(key); });
}

}  // namespace kvad
