// The Hugging Face Hub client: resolve a revision, list a model's files, download what kvad needs
// into the shared HF cache (hf_cache.h), and find models there offline. docs/hub.md has the API
// calls, the environment variables and the guarantees.
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/download.h"
#include "io/hf_cache.h"

namespace kvad::hf {

struct HubConfig {
  std::string endpoint = "https://huggingface.co";  // HF_ENDPOINT
  std::string token;                                // HF_TOKEN, HUGGING_FACE_HUB_TOKEN, or $HF_HOME/token
  bool offline = false;                             // HF_HUB_OFFLINE=1: never touch the network
  std::string cache_dir;                            // hub_cache_dir()
  double metadata_timeout_s = 10;                   // HF_HUB_ETAG_TIMEOUT: API calls and HEADs
  double download_timeout_s = 10;                   // HF_HUB_DOWNLOAD_TIMEOUT: a download stalled this long is retried
  double connect_timeout_s = 10;
  int retries = 5;  // resumes per file after a cut or stalled connection
  double retry_wait_s = 0.5;
  const std::atomic<bool>* cancel = nullptr;

  static HubConfig from_env();
};

// A file of a repository as the API lists it (GET /api/models/{repo}/revision/{rev}?blobs=true).
struct RepoFile {
  std::string path;
  std::optional<uint64_t> size;
  std::string blob_id;     // git object id (sha1)
  std::string lfs_sha256;  // set for Git LFS files
};

struct RepoInfo {
  std::string id;
  std::string commit;  // "sha"
  std::vector<RepoFile> files;
  const RepoFile* find(const std::string& path) const;
};

// Parses the API's answer; everything in it is validated (commit hash, file paths, hashes) because
// it names paths on this machine. Errors name `what`.
RepoInfo parse_repo_info(std::string_view body, const std::string& what);
// The shard files a model.safetensors.index.json names (weight_map values), unique and validated.
std::vector<std::string> parse_index_shards(std::string_view body, const std::string& what);

// The files of a repository a whole-model pull needs besides the weights.
const std::vector<std::string>& model_meta_files();
// The files `want` names in a listing: an exact path, or a quantisation tag matched against the
// .gguf files (all parts of a split GGUF). Errors list what there is.
std::vector<std::string> match_files(const std::vector<std::string>& paths, const std::string& want,
                                     const std::string& repo);

struct PullResult {
  std::string repo_id, commit, snapshot_dir;
  std::vector<std::string> files;  // paths in the snapshot
  uint64_t bytes_total = 0;        // of those files
  uint64_t bytes_downloaded = 0;   // transferred in this run
  int files_downloaded = 0;
  bool offline = false;            // answered from the cache without the network
};

class PullProgress : public TransferProgress {
 public:
  // The files about to be fetched (path, size); already-cached ones are not listed.
  virtual void plan(const std::vector<std::pair<std::string, uint64_t>>& files) {}
};

// Downloads ORG/NAME[@REV] (config, tokenizer files, generation config, safetensors through the
// index) or ORG/NAME:FILE into the cache. Files already there are not fetched again. The ref
// (refs/REV) is written last, once every file is in place.
PullResult pull(const HubConfig& cfg, const RepoRef& ref, PullProgress* progress = nullptr);

// The cache alone: the snapshot a ref names. `missing` lists the files a runnable model needs that
// are not there (config.json, tokenizer.json, weights per the index); empty when complete.
struct CachedModel {
  std::string repo_id, commit, dir;
  std::vector<std::string> files;    // for a :FILE ref, the matched files
  std::vector<std::string> missing;
};
std::optional<CachedModel> find_cached(const std::string& cache_dir, const RepoRef& ref);

// The Hub's error for a response, as a message that says what to do.
std::string describe_hub_error(long status, const std::string& x_error_code, const std::string& x_error_message,
                               const std::string& url, const HubConfig& cfg, const RepoRef& ref);

}  // namespace kvad::hf
