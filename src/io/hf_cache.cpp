#include "io/hf_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/fs.h"
#include "io/hashing.h"
#include "io/http.h"

namespace fs = std::filesystem;

namespace kvad::hf {

namespace {

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.';
}

const char* kExample = "e.g. Qwen/Qwen2.5-0.5B-Instruct, Qwen/Qwen2.5-0.5B-Instruct@main, city96/Qwen-Image-gguf:Q4_K_S";

void check_name_part(const std::string& whole, const std::string& part, const char* which) {
  if (part.empty()) fail("'{}': the {} is empty; a Hub model is named ORG/NAME ({})", whole, which, kExample);
  if (part.size() > 96) fail("'{}': the {} is longer than 96 characters", whole, which);
  for (char c : part)
    if (!name_char(c))
      fail("'{}': the {} '{}' has the character '{}'; Hub names use letters, digits, '-', '_' and '.' ({})", whole,
           which, part, c, kExample);
  if (part.front() == '-' || part.front() == '.' || part.back() == '-' || part.back() == '.')
    fail("'{}': the {} '{}' cannot start or end with '-' or '.'", whole, which, part);
  if (part.find("--") != std::string::npos || part.find("..") != std::string::npos)
    fail("'{}': the {} '{}' cannot contain '--' or '..'", whole, which, part);
}

std::string read_small(const std::string& path) {
  std::string s = read_file(path);
  while (!s.empty() && std::isspace((unsigned char)s.back())) s.pop_back();
  return s;
}

int64_t mtime_of(const struct stat& st) { return (int64_t)st.st_mtim.tv_sec; }

// A temporary name next to `path`, unique across processes and threads.
std::string unique_tmp(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter++);
}

void write_atomically(const std::string& path, const std::string& bytes) {
  std::string tmp = unique_tmp(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  bool ok = ::write(fd, bytes.data(), bytes.size()) == (ssize_t)bytes.size() && ::fsync(fd) == 0;
  int e = errno;
  ::close(fd);
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    e = ok ? errno : e;
    ::unlink(tmp.c_str());
    fail("{}: cannot write: {}", path, std::strerror(e));
  }
  fsync_directory(fs::path(path).parent_path().string());
}

}  // namespace

std::string RepoRef::str() const {
  std::string s = repo_id;
  if (revision_given) s += "@" + revision;
  if (!file.empty()) s += ":" + file;
  return s;
}

bool is_commit_hash(const std::string& s) { return is_hex(s, 40); }

void validate_repo_id(const std::string& repo_id) {
  size_t slash = repo_id.find('/');
  if (slash == std::string::npos)
    fail("'{}': a Hub model is named ORG/NAME ({})", repo_id, kExample);
  if (repo_id.find('/', slash + 1) != std::string::npos)
    fail("'{}': a Hub model is named ORG/NAME, with one '/' ({})", repo_id, kExample);
  check_name_part(repo_id, repo_id.substr(0, slash), "organisation (or user) name");
  std::string name = repo_id.substr(slash + 1);
  check_name_part(repo_id, name, "model name");
  if (name.size() >= 4 && name.substr(name.size() - 4) == ".git") fail("'{}': the model name cannot end in .git", repo_id);
}

void validate_revision(const std::string& rev) {
  if (rev.empty()) fail("the revision after '@' is empty (e.g. @main, @v1.0, or a 40-hex commit)");
  if (rev.size() > 255) fail("revision '{}' is longer than 255 characters", rev);
  for (char c : rev)
    if (!name_char(c) && c != '/')
      fail("revision '{}' has the character '{}' (branches, tags and commits use letters, digits, '-', '_', '.', '/')",
           rev, c);
  if (rev.front() == '/' || rev.back() == '/' || rev.front() == '.' || rev.find("..") != std::string::npos ||
      rev.find("//") != std::string::npos || rev.find("/.") != std::string::npos)
    fail("revision '{}' is not a valid branch, tag or commit name", rev);
}

void validate_repo_path(const std::string& path, const std::string& what) {
  if (path.empty()) fail("{}: empty file name", what);
  if (path.size() > 1024) fail("{}: file name longer than 1024 characters", what);
  if (path.front() == '/') fail("{}: '{}' is an absolute path; repository files are relative", what, path);
  size_t start = 0;
  while (true) {
    size_t end = path.find('/', start);
    std::string part = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (part.empty() || part == "." || part == "..")
      fail("{}: '{}' is not a plain relative path (empty, '.' or '..' component)", what, path);
    for (unsigned char c : part)
      if (c < 0x20 || c == 0x7f || c == '\\') fail("{}: '{}' has a control character or backslash", what, path);
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

void validate_etag(const std::string& etag, const std::string& what) {
  if (!is_hex(etag, 40) && !is_hex(etag, 64))
    fail("{}: the server's ETag '{}' is not a git sha1 or sha256 (40 or 64 hex digits); is HF_ENDPOINT a Hugging Face "
         "Hub?",
         what, etag.substr(0, 80));
}

bool looks_like_repo_ref(const std::string& s) {
  if (s.empty() || s[0] == '/' || s[0] == '.' || s[0] == '~') return false;
  size_t cut = s.find_first_of("@:");
  return s.substr(0, cut).find('/') != std::string::npos;
}

RepoRef parse_repo_ref(const std::string& s) {
  RepoRef r;
  std::string head = s;
  if (size_t colon = s.find(':'); colon != std::string::npos) {
    head = s.substr(0, colon);
    r.file = s.substr(colon + 1);
    if (r.file.empty()) fail("'{}': nothing after ':' (name a file, e.g. {}:model-Q4_K_M.gguf, or a tag: {}:Q4_K_M)", s, head, head);
    validate_repo_path(r.file, "'" + s + "'");
  }
  if (size_t at = head.find('@'); at != std::string::npos) {
    r.revision = head.substr(at + 1);
    r.revision_given = true;
    head = head.substr(0, at);
    validate_revision(r.revision);
  }
  r.repo_id = head;
  validate_repo_id(r.repo_id);
  return r;
}

std::string hf_home() {
  if (const char* h = std::getenv("HF_HOME"); h && *h) return h;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return join_path(x, "huggingface");
  if (const char* home = std::getenv("HOME"); home && *home) return join_path(join_path(home, ".cache"), "huggingface");
  fail("cannot locate the Hugging Face cache: set HF_HOME (or HOME)");
}

std::string hub_cache_dir() {
  if (const char* c = std::getenv("HF_HUB_CACHE"); c && *c) return c;
  if (const char* c = std::getenv("HUGGINGFACE_HUB_CACHE"); c && *c) return c;
  return join_path(hf_home(), "hub");
}

std::string repo_folder_name(const std::string& repo_id) {
  std::string out = "models";
  size_t start = 0;
  while (true) {
    size_t slash = repo_id.find('/', start);
    out += "--" + repo_id.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (slash == std::string::npos) break;
    start = slash + 1;
  }
  return out;
}

std::optional<std::string> repo_id_from_folder(const std::string& folder) {
  const std::string prefix = "models--";
  if (folder.rfind(prefix, 0) != 0) return std::nullopt;
  std::string rest = folder.substr(prefix.size());
  size_t sep = rest.find("--");
  if (sep == std::string::npos) return std::nullopt;  // a namespace-less legacy repo: not ours to name
  std::string id = rest.substr(0, sep) + "/" + rest.substr(sep + 2);
  try {
    validate_repo_id(id);
  } catch (const Error&) {
    return std::nullopt;
  }
  return id;
}

// ---- RepoCache ----

RepoCache::RepoCache(std::string cache_dir, std::string repo_id)
    : cache_dir_(std::move(cache_dir)), repo_id_(std::move(repo_id)), dir_(join_path(cache_dir_, repo_folder_name(repo_id_))) {}

std::string RepoCache::blobs_dir() const { return join_path(dir_, "blobs"); }
std::string RepoCache::blob_path(const std::string& etag) const { return join_path(blobs_dir(), etag); }
std::string RepoCache::snapshot_dir(const std::string& commit) const { return join_path(join_path(dir_, "snapshots"), commit); }
std::string RepoCache::file_path(const std::string& commit, const std::string& path) const {
  return join_path(snapshot_dir(commit), path);
}
std::string RepoCache::ref_path(const std::string& revision) const { return join_path(join_path(dir_, "refs"), revision); }
std::string RepoCache::lock_path(const std::string& etag) const {
  return join_path(join_path(join_path(cache_dir_, ".locks"), repo_folder_name(repo_id_)), etag + ".lock");
}

std::optional<std::string> RepoCache::read_ref(const std::string& revision) const {
  std::string p = ref_path(revision);
  if (!file_exists(p)) return std::nullopt;
  std::string c = read_small(p);
  if (!is_commit_hash(c)) fail("{}: expected a 40-hex commit hash, found '{}'", p, c.substr(0, 64));
  return c;
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  std::string p = ref_path(revision);
  if (file_exists(p) && read_small(p) == commit) return;  // unchanged: works on a read-only cache too
  make_directories(fs::path(p).parent_path().string());
  write_atomically(p, commit);  // no newline, as huggingface_hub writes it
}

std::optional<std::string> RepoCache::resolve_commit(const std::string& revision) const {
  if (is_commit_hash(revision) && is_directory(snapshot_dir(revision))) return revision;
  auto c = read_ref(revision);
  if (c && is_directory(snapshot_dir(*c))) return c;
  return std::nullopt;
}

void RepoCache::link(const std::string& commit, const std::string& path, const std::string& etag) const {
  std::string dst = file_path(commit, path);
  size_t depth = (size_t)std::count(path.begin(), path.end(), '/');
  std::string target;
  for (size_t i = 0; i < depth + 2; i++) target += "../";
  target += "blobs/" + etag;
  make_directories(fs::path(dst).parent_path().string());
  std::string tmp = unique_tmp(dst);
  if (::symlink(target.c_str(), tmp.c_str()) != 0)
    fail("{}: cannot create a link: {} (kvad needs symbolic links in the HF cache)", tmp, std::strerror(errno));
  if (::rename(tmp.c_str(), dst.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    fail("{}: cannot move into place: {}", dst, std::strerror(e));
  }
  fsync_directory(fs::path(dst).parent_path().string());
}

bool RepoCache::has_file(const std::string& commit, const std::string& path) const {
  return file_exists(file_path(commit, path));  // stat() follows the link: true only when the blob is there
}

std::optional<std::string> RepoCache::linked_etag(const std::string& commit, const std::string& path) const {
  std::error_code ec;
  fs::path p = file_path(commit, path);
  if (!fs::is_symlink(fs::symlink_status(p, ec))) return std::nullopt;
  fs::path target = fs::read_symlink(p, ec);
  if (ec || target.parent_path().filename() != "blobs") return std::nullopt;
  return target.filename().string();
}

void RepoCache::mark_no_exist(const std::string& commit, const std::string& path) const {
  std::string p = join_path(join_path(join_path(dir_, ".no_exist"), commit), path);
  try {
    make_directories(fs::path(p).parent_path().string());
    if (!fs::exists(p)) write_atomically(p, "");
  } catch (const Error&) {
    // only a hint for later look-ups: failing to record it changes nothing
  }
}

bool RepoCache::marked_no_exist(const std::string& commit, const std::string& path) const {
  return file_exists(join_path(join_path(join_path(dir_, ".no_exist"), commit), path));
}

// ---- FileLock ----

FileLock::FileLock(const std::string& path, const std::atomic<bool>* cancel) {
  make_directories(fs::path(path).parent_path().string());
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0664);
  if (fd_ < 0) fail("{}: cannot open lock file: {}", path, std::strerror(errno));
  auto start = std::chrono::steady_clock::now();
  bool told = false;
  while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) {
      if (errno == ENOLCK || errno == EOPNOTSUPP) break;  // file system without flock: go on unlocked
      int e = errno;
      ::close(fd_);
      fd_ = -1;
      fail("{}: cannot lock: {}", path, std::strerror(e));
    }
    if (cancel && cancel->load()) {
      ::close(fd_);
      fd_ = -1;
      throw Cancelled("interrupted while waiting for another download of the same file");
    }
    if (!told && std::chrono::steady_clock::now() - start > std::chrono::seconds(2)) {
      std::fprintf(stderr, "kvad: waiting for another process downloading the same file (%s)\n", path.c_str());
      told = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

// ---- scanning ----

bool CachedSnapshot::has(const std::string& path) const {
  for (const CachedFile& f : files)
    if (f.path == path) return f.present;
  return false;
}

static CachedSnapshot scan_snapshot(const fs::path& dir, const std::string& commit) {
  CachedSnapshot s;
  s.commit = commit;
  std::error_code ec;
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0) s.modified = mtime_of(st);
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const fs::path& p = it->path();
    if (::lstat(p.c_str(), &st) != 0 || S_ISDIR(st.st_mode)) continue;
    CachedFile f;
    f.path = p.lexically_relative(dir).generic_string();  // (fs::relative would follow the link)
    s.modified = std::max(s.modified, mtime_of(st));
    if (S_ISLNK(st.st_mode)) {
      fs::path target = fs::read_symlink(p, ec);
      if (!ec && target.parent_path().filename() == "blobs") f.etag = target.filename().string();
    }
    struct stat real {};
    if (::stat(p.c_str(), &real) == 0 && S_ISREG(real.st_mode)) {
      f.present = true;
      f.size = (uint64_t)real.st_size;
    }
    s.files.push_back(std::move(f));
  }
  std::sort(s.files.begin(), s.files.end(), [](const CachedFile& a, const CachedFile& b) { return a.path < b.path; });
  return s;
}

std::optional<CachedRepo> scan_repo(const std::string& cache_dir, const std::string& repo_id) {
  RepoCache rc(cache_dir, repo_id);
  if (!is_directory(rc.dir())) return std::nullopt;
  CachedRepo r;
  r.repo_id = repo_id;
  r.dir = rc.dir();
  std::error_code ec;
  std::map<std::string, std::vector<std::string>> refs_by_commit;
  fs::path refs = fs::path(rc.dir()) / "refs";
  for (auto it = fs::recursive_directory_iterator(refs, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    try {
      std::string commit = read_small(it->path().string());
      refs_by_commit[commit].push_back(it->path().lexically_relative(refs).generic_string());
    } catch (const Error&) {
    }
  }
  fs::path snaps = fs::path(rc.dir()) / "snapshots";
  for (auto it = fs::directory_iterator(snaps, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->is_directory()) continue;
    std::string commit = it->path().filename().string();
    CachedSnapshot s = scan_snapshot(it->path(), commit);
    s.refs = refs_by_commit[commit];
    std::sort(s.refs.begin(), s.refs.end());
    r.modified = std::max(r.modified, s.modified);
    r.snapshots.push_back(std::move(s));
  }
  std::sort(r.snapshots.begin(), r.snapshots.end(),
            [](const CachedSnapshot& a, const CachedSnapshot& b) { return a.modified > b.modified; });
  for (auto it = fs::directory_iterator(rc.blobs_dir(), ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    struct stat st {};
    if (::lstat(it->path().c_str(), &st) == 0 && S_ISREG(st.st_mode)) r.size_on_disk += (uint64_t)st.st_blocks * 512;
  }
  return r;
}

std::vector<CachedRepo> scan_cache(const std::string& cache_dir) {
  std::vector<CachedRepo> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(cache_dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->is_directory()) continue;
    auto id = repo_id_from_folder(it->path().filename().string());
    if (!id) continue;
    if (auto r = scan_repo(cache_dir, *id)) out.push_back(std::move(*r));
  }
  std::sort(out.begin(), out.end(), [](const CachedRepo& a, const CachedRepo& b) { return a.repo_id < b.repo_id; });
  return out;
}

// ---- removal ----

static uint64_t blob_size(const std::string& dir, const std::string& etag) {
  struct stat st {};
  if (::lstat(join_path(join_path(dir, "blobs"), etag).c_str(), &st) != 0) return 0;
  return (uint64_t)st.st_blocks * 512;
}

RemovalPlan plan_removal(const CachedRepo& repo, const std::vector<std::string>& commits) {
  RemovalPlan p;
  p.repo_id = repo.repo_id;
  std::set<std::string> removed(commits.begin(), commits.end()), kept_blobs, gone_blobs;
  for (const CachedSnapshot& s : repo.snapshots) {
    bool rm = removed.count(s.commit) > 0;
    if (rm) {
      p.commits.push_back(s.commit);
      for (const std::string& ref : s.refs) p.refs.push_back(ref);
    }
    for (const CachedFile& f : s.files)
      if (!f.etag.empty()) (rm ? gone_blobs : kept_blobs).insert(f.etag);
  }
  p.whole_repo = p.commits.size() == repo.snapshots.size();
  if (p.whole_repo) {
    p.bytes_freed = repo.size_on_disk;
    std::error_code ec;
    for (auto it = fs::directory_iterator(join_path(repo.dir, "blobs"), ec); !ec && it != fs::directory_iterator();
         it.increment(ec))
      p.blobs.push_back(it->path().filename().string());
    std::sort(p.blobs.begin(), p.blobs.end());
    return p;
  }
  for (const std::string& b : gone_blobs)
    if (!kept_blobs.count(b)) {
      p.blobs.push_back(b);
      p.bytes_freed += blob_size(repo.dir, b);
    }
  return p;
}

RemovalPlan plan_file_removal(const CachedRepo& repo, const std::string& commit, const std::string& path) {
  RemovalPlan p;
  p.repo_id = repo.repo_id;
  std::string etag;
  bool found = false;
  std::set<std::string> others;
  for (const CachedSnapshot& s : repo.snapshots)
    for (const CachedFile& f : s.files) {
      if (s.commit == commit && f.path == path) {
        etag = f.etag;
        found = true;
      } else if (!f.etag.empty()) {
        others.insert(f.etag);
      }
    }
  if (!found) return p;
  p.files.emplace_back(commit, path);
  if (!etag.empty() && !others.count(etag)) {
    p.blobs.push_back(etag);
    p.bytes_freed = blob_size(repo.dir, etag);
  }
  return p;
}

static void remove_path(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) fail("{}: cannot remove: {}", p.string(), ec.message());
}

void execute_removal(const std::string& cache_dir, const RemovalPlan& plan) {
  RepoCache rc(cache_dir, plan.repo_id);
  if (plan.whole_repo) {
    remove_path(rc.dir());
    remove_path(fs::path(cache_dir) / ".locks" / repo_folder_name(plan.repo_id));
    return;
  }
  // Links first, blobs last: an interrupted removal leaves dangling links (re-pulled as missing),
  // never a snapshot pointing at a half-deleted state that looks complete.
  for (const std::string& ref : plan.refs) remove_path(rc.ref_path(ref));
  for (const std::string& c : plan.commits) {
    remove_path(rc.snapshot_dir(c));
    remove_path(fs::path(rc.dir()) / ".no_exist" / c);
  }
  for (const auto& [commit, path] : plan.files) remove_path(rc.file_path(commit, path));
  for (const std::string& b : plan.blobs) remove_path(rc.blob_path(b));
}

}  // namespace kvad::hf
