// The Hugging Face cache, shared with Python (huggingface_hub, transformers): the same folders,
// names and links, so a model downloaded by either side loads in the other without the network.
//
//   $HF_HUB_CACHE (default $HF_HOME/hub, $HF_HOME default $XDG_CACHE_HOME/huggingface or
//   ~/.cache/huggingface)
//     models--ORG--NAME/
//       blobs/<etag>                 file contents, named by sha256 (LFS files) or git sha1 (others)
//       blobs/<etag>.incomplete      a download in progress (kvad resumes it)
//       refs/<revision>              the commit a branch/tag resolved to (40 hex, no newline)
//       snapshots/<commit>/<path>    relative symlink -> ../../blobs/<etag> (one more ../ per subfolder)
//       .no_exist/<commit>/<path>    empty marker: the file does not exist at that commit
//     .locks/models--ORG--NAME/<etag>.lock   flock(2) lock held while a blob is being downloaded
//
// See docs/hub.md.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kvad::hf {

// A model as users name it: ORG/NAME, ORG/NAME@REVISION, ORG/NAME:FILE (e.g. a .gguf file or a
// quantisation tag such as Q4_K_S), or ORG/NAME@REVISION:FILE.
struct RepoRef {
  std::string repo_id;            // ORG/NAME
  std::string revision = "main";  // branch, tag or 40-hex commit
  bool revision_given = false;
  std::string file;               // "" = the whole model

  std::string str() const;  // back to the user's notation
};

// Parses and validates; errors say what is wrong with the name and show the expected form.
RepoRef parse_repo_ref(const std::string& s);
// Whether `s` is shaped like a Hub name (has a '/', is not an absolute or ./ path). Such names are
// looked up in the HF cache (and validated: a malformed one is an error, not a silent miss).
bool looks_like_repo_ref(const std::string& s);

void validate_repo_id(const std::string& repo_id);
void validate_revision(const std::string& revision);
// A path inside a repository as the Hub reports it: relative, '/'-separated, no '.'/'..' parts.
void validate_repo_path(const std::string& path, const std::string& what);
// A blob name (etag): 40 or 64 lower-case hex digits.
void validate_etag(const std::string& etag, const std::string& what);
bool is_commit_hash(const std::string& s);

std::string hf_home();
std::string hub_cache_dir();

// "models--ORG--NAME" and back (nullopt for datasets--, spaces--, anything else).
std::string repo_folder_name(const std::string& repo_id);
std::optional<std::string> repo_id_from_folder(const std::string& folder);

// One repository's folder in a cache.
class RepoCache {
 public:
  RepoCache(std::string cache_dir, std::string repo_id);
  const std::string& cache_dir() const { return cache_dir_; }
  const std::string& repo_id() const { return repo_id_; }
  const std::string& dir() const { return dir_; }
  std::string blobs_dir() const;
  std::string blob_path(const std::string& etag) const;
  std::string snapshot_dir(const std::string& commit) const;
  std::string file_path(const std::string& commit, const std::string& path) const;
  std::string ref_path(const std::string& revision) const;
  std::string lock_path(const std::string& etag) const;

  std::optional<std::string> read_ref(const std::string& revision) const;
  // Records revision -> commit (atomically); nothing when the revision is the commit itself.
  void write_ref(const std::string& revision, const std::string& commit) const;
  // The commit a revision names, from the cache alone: a commit with a snapshot folder, or refs/.
  std::optional<std::string> resolve_commit(const std::string& revision) const;
  // Points snapshots/<commit>/<path> at blobs/<etag> (relative link, replaced atomically).
  void link(const std::string& commit, const std::string& path, const std::string& etag) const;
  // The file is in the snapshot and its blob is complete.
  bool has_file(const std::string& commit, const std::string& path) const;
  // The blob a snapshot file points at, if it is one of ours (a link into blobs/).
  std::optional<std::string> linked_etag(const std::string& commit, const std::string& path) const;
  void mark_no_exist(const std::string& commit, const std::string& path) const;
  bool marked_no_exist(const std::string& commit, const std::string& path) const;

 private:
  std::string cache_dir_, repo_id_, dir_;
};

// An exclusive flock(2) on a lock file (the one huggingface_hub's filelock takes for the same blob).
// Waits, polling `cancel` (if given) so Ctrl-C still works while another process downloads.
class FileLock {
 public:
  FileLock(const std::string& path, const std::atomic<bool>* cancel = nullptr);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// ---- what is in a cache (for ls / rm / offline resolution) ----

struct CachedFile {
  std::string path;       // inside the repo
  std::string etag;       // blob name ("" when the snapshot entry is not a link into blobs/)
  uint64_t size = 0;      // of the blob (0 when missing)
  bool present = false;   // the link resolves to a file
};

struct CachedSnapshot {
  std::string commit;
  std::vector<std::string> refs;  // revisions that point here
  std::vector<CachedFile> files;
  int64_t modified = 0;           // newest mtime in the snapshot (seconds since epoch)
  bool has(const std::string& path) const;
};

struct CachedRepo {
  std::string repo_id;
  std::string dir;
  std::vector<CachedSnapshot> snapshots;
  uint64_t size_on_disk = 0;  // every blob, complete or not
  int64_t modified = 0;
};

std::optional<CachedRepo> scan_repo(const std::string& cache_dir, const std::string& repo_id);
std::vector<CachedRepo> scan_cache(const std::string& cache_dir);

// What removing some snapshots of a repo deletes: those snapshot folders, the refs that point at
// them, and the blobs no remaining snapshot links to. Removing every snapshot removes the repo folder.
struct RemovalPlan {
  std::string repo_id;
  std::vector<std::string> commits;
  std::vector<std::string> blobs;     // etags
  std::vector<std::string> refs;
  std::vector<std::pair<std::string, std::string>> files;  // (commit, path) links removed on their own
  uint64_t bytes_freed = 0;
  bool whole_repo = false;
};
RemovalPlan plan_removal(const CachedRepo& repo, const std::vector<std::string>& commits);
// Removes one file from one snapshot (and its blob if nothing else links to it).
RemovalPlan plan_file_removal(const CachedRepo& repo, const std::string& commit, const std::string& path);
void execute_removal(const std::string& cache_dir, const RemovalPlan& plan);

}  // namespace kvad::hf
