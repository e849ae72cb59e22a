#include "io/hub.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/text.h"
#include "io/hashing.h"
#include "io/http.h"

namespace fs = std::filesystem;

namespace kvad::hf {

namespace {

const char* kIndex = "model.safetensors.index.json";
const char* kSingle = "model.safetensors";

std::string env_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

bool env_true(const char* name) {
  std::string v = env_str(name);
  for (char& c : v) c = (char)std::toupper((unsigned char)c);
  return v == "1" || v == "ON" || v == "YES" || v == "TRUE";
}

double env_seconds(const char* name, double dflt) {
  std::string v = env_str(name);
  if (v.empty()) return dflt;
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end || !(d > 0) || d > 86400) fail("{}='{}': expected a number of seconds", name, v);
  return d;
}

std::string normalize_etag(std::string e) {
  e = trim_space(e);
  if (e.rfind("W/", 0) == 0) e = e.substr(2);
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') e = e.substr(1, e.size() - 2);
  return e;
}

std::string list_some(const std::vector<std::string>& v, size_t n = 12) {
  std::string s;
  for (size_t i = 0; i < v.size() && i < n; i++) s += (i ? ", " : "") + v[i];
  if (v.size() > n) s += fmt::format(", ... ({} more)", v.size() - n);
  return s.empty() ? "(none)" : s;
}

std::vector<std::string> auth_headers(const HubConfig& cfg, const std::string& url) {
  if (cfg.token.empty() || url_origin(url) != url_origin(cfg.endpoint)) return {};
  return {"Authorization: Bearer " + cfg.token};
}

[[noreturn]] void network_failure(const HttpError& e, const HubConfig& cfg, double timeout) {
  switch (e.kind) {
    case HttpError::Kind::Connect:
      fail("cannot reach {}: {} (check the network or HF_ENDPOINT; with HF_HUB_OFFLINE=1 kvad uses only the cache)",
           cfg.endpoint, e.what());
    case HttpError::Kind::Timeout:
      fail("{} did not answer within {} s (HF_HUB_ETAG_TIMEOUT sets the limit): {}", cfg.endpoint, timeout, e.what());
    case HttpError::Kind::Tls:
      fail("TLS failure talking to {}: {} (a proxy or missing CA certificates?)", cfg.endpoint, e.what());
    default:
      fail("talking to {}: {}", cfg.endpoint, e.what());
  }
}

HttpResponse metadata_request(const HubConfig& cfg, const std::string& method, const std::string& url) {
  if (cfg.offline) fail("HF_HUB_OFFLINE is set: not contacting {}", url);
  HttpRequest rq;
  rq.method = method;
  rq.url = url;
  rq.headers = auth_headers(cfg, url);
  rq.connect_timeout_s = std::min(cfg.connect_timeout_s, cfg.metadata_timeout_s);
  rq.total_timeout_s = cfg.metadata_timeout_s;
  rq.cancel = cfg.cancel;
  try {
    return http_request(rq);
  } catch (const HttpError& e) {
    network_failure(e, cfg, cfg.metadata_timeout_s);
  }
}

[[noreturn]] void hub_failure(const HttpResponse& r, const std::string& url, const HubConfig& cfg, const RepoRef& ref) {
  throw Error(describe_hub_error(r.status, r.header("x-error-code").value_or(""),
                                 r.header("x-error-message").value_or(""), url, cfg, ref));
}

RepoInfo fetch_info(const HubConfig& cfg, const RepoRef& ref) {
  std::string url = fmt::format("{}/api/models/{}/revision/{}?blobs=true", cfg.endpoint, ref.repo_id,
                                url_encode(ref.revision, true));
  HttpResponse r = metadata_request(cfg, "GET", url);
  if (r.status != 200) hub_failure(r, url, cfg, ref);
  RepoInfo info = parse_repo_info(r.body, url);
  if (is_commit_hash(ref.revision) && info.commit != ref.revision)
    fail("{}: asked for commit {} but the Hub answered with {}", ref.repo_id, ref.revision, info.commit);
  return info;
}

struct FileMeta {
  std::string etag, commit, location;
  uint64_t size = 0;
};

// HEAD /{repo}/resolve/{commit}/{path}, following redirects within the Hub (a renamed repo) but not
// to the file host: its Location is where the bytes are fetched from.
FileMeta head_file(const HubConfig& cfg, const RepoRef& ref, const std::string& commit, const std::string& path) {
  std::string url = fmt::format("{}/{}/resolve/{}/{}", cfg.endpoint, ref.repo_id, commit, url_encode(path, false));
  for (int hop = 0;; hop++) {
    HttpResponse r = metadata_request(cfg, "HEAD", url);
    auto loc = r.header("location");
    bool redirect = r.status >= 300 && r.status < 400 && loc;
    if (redirect && !r.header("x-linked-etag") && !r.header("etag") && hop < 5 &&
        url_origin(url_resolve(url, *loc)) == url_origin(url)) {
      url = url_resolve(url, *loc);  // same site, no file metadata yet: a renamed repo
      continue;
    }
    if (!(r.status >= 200 && r.status < 300) && !redirect) hub_failure(r, url, cfg, ref);
    FileMeta m;
    m.etag = normalize_etag(r.header("x-linked-etag").value_or(r.header("etag").value_or("")));
    if (m.etag.empty())
      fail("{}: {}: the server sent no ETag, so the file cannot be verified (is HF_ENDPOINT a Hugging Face Hub?)",
           ref.repo_id, path);
    validate_etag(m.etag, ref.repo_id + ": " + path);
    m.commit = r.header("x-repo-commit").value_or("");
    std::string size = r.header("x-linked-size").value_or(redirect ? "" : r.header("content-length").value_or(""));
    char* end = nullptr;
    unsigned long long n = std::strtoull(size.c_str(), &end, 10);
    if (size.empty() || *end) fail("{}: {}: the server sent no file size (X-Linked-Size / Content-Length)", ref.repo_id, path);
    m.size = n;
    m.location = redirect ? url_resolve(url, *loc) : url;
    return m;
  }
}

// One file into the snapshot (blob + link). Returns the bytes transferred.
uint64_t fetch_file(const HubConfig& cfg, const RepoCache& rc, const RepoRef& ref, const RepoInfo& info,
                    const std::string& path, PullProgress* progress) {
  if (rc.has_file(info.commit, path)) return 0;
  FileMeta m = head_file(cfg, ref, info.commit, path);
  if (!m.commit.empty() && m.commit != info.commit)
    fail("{}: {}: the Hub served commit {} while the listing was of {}", ref.repo_id, path, m.commit, info.commit);
  if (const RepoFile* f = info.find(path)) {
    const std::string& listed = f->lfs_sha256.empty() ? f->blob_id : f->lfs_sha256;
    if (!listed.empty() && listed != m.etag)
      fail("{}: {}: the file's hash in the listing ({}) differs from the one the file endpoint reports ({})",
           ref.repo_id, path, listed, m.etag);
    if (f->size && *f->size != m.size)
      fail("{}: {}: the listing says {} bytes, the file endpoint {}", ref.repo_id, path, *f->size, m.size);
  }
  BlobSource src;
  src.url = m.location;
  src.headers = auth_headers(cfg, m.location);
  src.etag = m.etag;
  src.size = m.size;
  src.name = path;
  DownloadSettings set;
  set.connect_timeout_s = cfg.connect_timeout_s;
  set.stall_timeout_s = cfg.download_timeout_s;
  set.retries = cfg.retries;
  set.retry_wait_s = cfg.retry_wait_s;
  set.cancel = cfg.cancel;
  uint64_t n = download_blob(rc, src, set, progress);
  rc.link(info.commit, path, m.etag);
  return n;
}

void ensure_writable(const RepoCache& rc) {
  try {
    make_directories(rc.blobs_dir());
    make_directories(join_path(rc.dir(), "snapshots"));
  } catch (const Error& e) {
    fail("{} (set HF_HUB_CACHE or HF_HOME to a writable folder)", e.what());
  }
  std::string probe = join_path(rc.blobs_dir(), ".kvad-write-test-XXXXXX");
  int fd = ::mkstemp(probe.data());
  if (fd < 0)
    fail("the Hugging Face cache {} is not writable: {} (set HF_HUB_CACHE or HF_HOME to a writable folder)",
         rc.blobs_dir(), std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

std::vector<std::string> weight_files_of(const std::vector<std::string>& paths) {
  std::vector<std::string> out;
  for (const std::string& p : paths)
    if (ends_with_ignoring_case(p, ".gguf")) out.push_back(p);
  return out;
}

}  // namespace

HubConfig HubConfig::from_env() {
  HubConfig c;
  if (std::string e = env_str("HF_ENDPOINT"); !e.empty()) c.endpoint = e;
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (c.endpoint.rfind("https://", 0) != 0 && c.endpoint.rfind("http://", 0) != 0)
    fail("HF_ENDPOINT='{}': expected an http:// or https:// address", c.endpoint);
  c.token = trim_space(env_str("HF_TOKEN"));
  if (c.token.empty()) c.token = trim_space(env_str("HUGGING_FACE_HUB_TOKEN"));
  if (c.token.empty()) {
    std::string path = env_str("HF_TOKEN_PATH");
    if (path.empty()) path = join_path(hf_home(), "token");
    if (file_exists(path)) {
      try {
        c.token = trim_space(read_file(path));
      } catch (const Error&) {
      }
    }
  }
  c.offline = env_true("HF_HUB_OFFLINE") || env_true("TRANSFORMERS_OFFLINE");
  c.cache_dir = hub_cache_dir();
  c.metadata_timeout_s = env_seconds("HF_HUB_ETAG_TIMEOUT", 10);
  c.download_timeout_s = env_seconds("HF_HUB_DOWNLOAD_TIMEOUT", 10);
  return c;
}

const RepoFile* RepoInfo::find(const std::string& path) const {
  for (const RepoFile& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

RepoInfo parse_repo_info(std::string_view body, const std::string& what) {
  Json j = parse_json(body, what);
  if (!j.is_object()) fail("{}: expected a JSON object", what);
  RepoInfo info;
  info.id = json_str_or(j, "id", "", what);
  info.commit = json_str_or(j, "sha", "", what);
  if (!is_commit_hash(info.commit))
    fail("{}: 'sha' must be a 40-hex commit hash, got '{}'", what, info.commit.substr(0, 64));
  auto sib = j.find("siblings");
  if (sib == j.end() || !sib->is_array()) fail("{}: no 'siblings' list of files", what);
  std::set<std::string> seen;
  for (const Json& s : *sib) {
    if (!s.is_object()) fail("{}: a 'siblings' entry is not an object", what);
    RepoFile f;
    f.path = json_str_or(s, "rfilename", "", what + ": siblings");
    validate_repo_path(f.path, what + ": siblings");
    if (!seen.insert(f.path).second) fail("{}: file '{}' is listed twice", what, f.path);
    std::string ctx = what + ": " + f.path;
    if (s.contains("size") && !s["size"].is_null()) {
      int64_t n = json_int(s, "size", ctx);
      if (n < 0) fail("{}: negative size", ctx);
      f.size = (uint64_t)n;
    }
    f.blob_id = json_str_or(s, "blobId", "", ctx);
    if (!f.blob_id.empty() && !is_hex(f.blob_id, 40)) fail("{}: 'blobId' is not a 40-hex git object id", ctx);
    if (auto l = s.find("lfs"); l != s.end() && !l->is_null()) {
      if (!l->is_object()) fail("{}: 'lfs' is not an object", ctx);
      f.lfs_sha256 = json_str_or(*l, "sha256", "", ctx + ": lfs");
      if (!is_hex(f.lfs_sha256, 64)) fail("{}: 'lfs.sha256' is not 64 hex digits", ctx);
      int64_t n = json_int(*l, "size", ctx + ": lfs");
      if (n < 0) fail("{}: negative lfs size", ctx);
      f.size = (uint64_t)n;
    }
    info.files.push_back(std::move(f));
  }
  return info;
}

std::vector<std::string> parse_index_shards(std::string_view body, const std::string& what) {
  Json j = parse_json(body, what);
  if (!j.is_object()) fail("{}: expected a JSON object", what);
  auto wm = j.find("weight_map");
  if (wm == j.end() || !wm->is_object() || wm->empty()) fail("{}: no 'weight_map' of tensor -> shard file", what);
  std::set<std::string> shards;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string()) fail("{}: weight_map['{}'] is not a file name", what, it.key());
    std::string f = it->get<std::string>();
    validate_repo_path(f, what + ": weight_map");
    shards.insert(f);
  }
  return {shards.begin(), shards.end()};
}

const std::vector<std::string>& model_meta_files() {
  static const std::vector<std::string> files = {
      "config.json",          "generation_config.json", "tokenizer.json",     "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json",   "chat_template.jinja", "chat_template.json",
  };
  return files;
}

// A diffusers pipeline (model_index.json): the parts kvad paints with (not a safety checker or
// feature extractor), each part's json and tokenizer files, and ONE weight variant per part: the
// plain safetensors (or its sharded index), else the .fp16 one; never .bin / .ckpt / onnx / flax
// copies, nor the repo's top-level single files (pull those as ORG/NAME:FILE).
const char* const kPipelineParts[] = {"unet", "vae", "text_encoder", "text_encoder_2", "tokenizer", "tokenizer_2", "scheduler"};

struct PipelinePlan {
  std::vector<std::string> files;    // to fetch as they are
  std::vector<std::string> indexes;  // sharded weights: the index, then the shards it names
};

PipelinePlan pipeline_plan(const std::vector<std::string>& paths) {
  std::set<std::string> have(paths.begin(), paths.end());
  PipelinePlan plan;
  plan.files.push_back("model_index.json");
  for (const char* part : kPipelineParts) {
    const std::string d = std::string(part) + "/";
    for (const char* meta : {"config.json", "scheduler_config.json", "vocab.json", "merges.txt", "tokenizer_config.json",
                             "special_tokens_map.json", "added_tokens.json"})
      if (have.count(d + meta)) plan.files.push_back(d + meta);
    for (const char* stem : {"diffusion_pytorch_model", "model"}) {
      const std::string base = d + stem;
      if (have.count(base + ".safetensors")) plan.files.push_back(base + ".safetensors");
      else if (have.count(base + ".safetensors.index.json")) plan.indexes.push_back(base + ".safetensors.index.json");
      else if (have.count(base + ".fp16.safetensors")) plan.files.push_back(base + ".fp16.safetensors");
      else if (have.count(base + ".safetensors.index.fp16.json")) plan.indexes.push_back(base + ".safetensors.index.fp16.json");
      else continue;
      break;
    }
  }
  return plan;
}

// The shards an index (at `index_path` in the repo) names, as repo paths beside it.
std::vector<std::string> shards_beside(const std::string& index_path, std::string_view body, const std::string& what) {
  std::string dir = index_path.find('/') == std::string::npos ? "" : index_path.substr(0, index_path.rfind('/') + 1);
  std::vector<std::string> out;
  for (const std::string& s : parse_index_shards(body, what)) out.push_back(dir + s);
  return out;
}

std::vector<std::string> match_files(const std::vector<std::string>& paths, const std::string& want,
                                     const std::string& repo) {
  for (const std::string& p : paths)
    if (p == want) return {p};
  std::vector<std::string> ggufs = weight_files_of(paths);
  const std::string tag = ascii_lower(want);
  // A tag stands between separators: "Q4_K" matches model-Q4_K.gguf but not model-Q4_K_M.gguf.
  auto sep_before = [](char c) { return c == '-' || c == '.' || c == '/' || c == '_'; };
  auto sep_after = [](char c) { return c == '-' || c == '.' || c == '/'; };
  std::vector<std::string> hits;
  for (const std::string& p : ggufs) {
    std::string lp = ascii_lower(p);
    for (size_t at = lp.find(tag); at != std::string::npos; at = lp.find(tag, at + 1)) {
      bool before = at == 0 || sep_before(lp[at - 1]);
      size_t after = at + tag.size();
      bool next = after == lp.size() || sep_after(lp[after]);
      if (before && next) {
        hits.push_back(p);
        break;
      }
    }
  }
  if (hits.empty()) {
    if (ggufs.empty())
      fail("{}: no file '{}' in the repository (files: {})", repo, want, list_some(paths));
    fail("{}: no file or GGUF quantisation '{}' in the repository (GGUF files: {})", repo, want, list_some(ggufs));
  }
  // Several hits are fine when they are the parts of one split GGUF (NAME-00001-of-00003.gguf ...).
  auto stem = [](const std::string& p) {
    std::string s = p;
    size_t of = s.rfind("-of-");
    if (of != std::string::npos && of >= 6 && s[of - 6] == '-') s.erase(of - 6);
    return s;
  };
  std::set<std::string> stems;
  for (const std::string& h : hits) stems.insert(stem(h));
  if (stems.size() > 1) fail("{}: '{}' matches several files: {}; name one of them", repo, want, list_some(hits));
  std::sort(hits.begin(), hits.end());
  return hits;
}

std::string describe_hub_error(long status, const std::string& code, const std::string& msg, const std::string& url,
                               const HubConfig& cfg, const RepoRef& ref) {
  const std::string& repo = ref.repo_id;
  std::string tok = cfg.token.empty() ? "HF_TOKEN is not set" : "HF_TOKEN was sent";
  std::string tokens_page = cfg.endpoint + "/settings/tokens";
  std::string out;
  if (code == "GatedRepo") {
    out = fmt::format("{} is a gated model: request access at {}/{}, then set HF_TOKEN to a read token from {} ({})",
                      repo, cfg.endpoint, repo, tokens_page, tok);
    if (!cfg.token.empty()) out += "; the token's account has no access yet";
  } else if (msg == "Invalid credentials in Authorization header" || (status == 401 && code.empty() && !cfg.token.empty())) {
    out = fmt::format("{}: the Hub rejected the token in HF_TOKEN (invalid or expired); create a read token at {}", repo,
                      tokens_page);
  } else if (code == "RepoNotFound" || status == 401) {
    out = fmt::format("{}: no such model on {}, or it is private or gated and {} (HTTP {}). Check the name; for a "
                      "private or gated model set HF_TOKEN to a read token from {}",
                      repo, cfg.endpoint, tok, status, tokens_page);
  } else if (code == "RevisionNotFound") {
    out = fmt::format("{}: revision '{}' not found (use a branch, a tag or a full commit hash; the default is main)",
                      repo, ref.revision);
  } else if (code == "EntryNotFound") {
    out = fmt::format("{}: file not found on the Hub: {}", repo, url);
  } else if (status == 403) {
    out = fmt::format("{}: access denied (HTTP 403; {}); make sure the token can read this repository ({})", repo, tok,
                      tokens_page);
  } else if (status == 404) {
    out = fmt::format("{}: not found (HTTP 404) at {}; is HF_ENDPOINT ({}) a Hugging Face Hub?", repo, url, cfg.endpoint);
  } else if (status == 429) {
    out = fmt::format("{}: too many requests (HTTP 429); wait a while and run the command again", cfg.endpoint);
  } else if (status >= 500) {
    out = fmt::format("{}: server error (HTTP {}); try again later", cfg.endpoint, status);
  } else {
    out = fmt::format("{}: unexpected HTTP {} from {}", repo, status, url);
  }
  if (!msg.empty() && out.find(msg) == std::string::npos) out += " [server: " + msg.substr(0, 300) + "]";
  return out;
}

std::optional<CachedModel> find_cached(const std::string& cache_dir, const RepoRef& ref) {
  RepoCache rc(cache_dir, ref.repo_id);
  std::optional<std::string> commit;
  try {
    commit = rc.resolve_commit(ref.revision);
  } catch (const Error&) {
    return std::nullopt;  // a damaged ref: as good as absent (a pull rewrites it)
  }
  if (!commit) return std::nullopt;
  CachedModel m;
  m.repo_id = ref.repo_id;
  m.commit = *commit;
  m.dir = rc.snapshot_dir(*commit);
  if (!ref.file.empty()) {
    auto repo = scan_repo(cache_dir, ref.repo_id);
    std::vector<std::string> present;
    if (repo)
      for (const CachedSnapshot& s : repo->snapshots)
        if (s.commit == *commit)
          for (const CachedFile& f : s.files)
            if (f.present) present.push_back(f.path);
    try {
      m.files = match_files(present, ref.file, ref.repo_id);
    } catch (const Error&) {
      m.missing.push_back(ref.file);
    }
    return m;
  }
  auto need = [&](const std::string& p) {
    if (!rc.has_file(*commit, p)) m.missing.push_back(p);
  };
  if (rc.has_file(*commit, "model_index.json") && !rc.has_file(*commit, "config.json")) {
    // A pipeline: complete when each part pulled has its json and its weights (the plan over what
    // the snapshot holds finds the same files the pull chose).
    std::vector<std::string> present;
    if (auto repo = scan_repo(cache_dir, ref.repo_id))
      for (const CachedSnapshot& s : repo->snapshots)
        if (s.commit == *commit)
          for (const CachedFile& f : s.files) present.push_back(f.path);
    PipelinePlan plan = pipeline_plan(present);
    for (const std::string& f : plan.files) need(f);
    for (const std::string& idx : plan.indexes) {
      try {
        for (const std::string& sh : shards_beside(idx, read_file(rc.file_path(*commit, idx)), idx)) need(sh);
      } catch (const Error&) {
        m.missing.push_back(idx);
      }
    }
    if (!rc.has_file(*commit, "unet/config.json")) m.missing.push_back("unet/config.json");
    return m;
  }
  need("config.json");
  if (!rc.has_file(*commit, "tokenizer.json") && !rc.marked_no_exist(*commit, "tokenizer.json"))
    m.missing.push_back("tokenizer.json");
  if (rc.has_file(*commit, kIndex)) {
    try {
      for (const std::string& s : parse_index_shards(read_file(rc.file_path(*commit, kIndex)), kIndex)) need(s);
    } catch (const Error&) {
      m.missing.push_back(kIndex);
    }
  } else if (!rc.has_file(*commit, kSingle)) {
    m.missing.push_back(kSingle);
  }
  return m;
}

PullResult pull(const HubConfig& cfg, const RepoRef& ref, PullProgress* progress) {
  RepoCache rc(cfg.cache_dir, ref.repo_id);
  PullResult res;
  res.repo_id = ref.repo_id;
  if (cfg.offline) {
    auto c = find_cached(cfg.cache_dir, ref);
    if (!c || !c->missing.empty())
      fail("{}: HF_HUB_OFFLINE is set and {} (cache: {}); unset HF_HUB_OFFLINE to download it", ref.str(),
           c ? "the cached copy is incomplete (missing " + list_some(c->missing) + ")"
             : std::string("it is not in the Hugging Face cache"),
           cfg.cache_dir);
    res.commit = c->commit;
    res.snapshot_dir = c->dir;
    res.files = c->files;
    res.offline = true;
    return res;
  }

  RepoInfo info = fetch_info(cfg, ref);
  res.commit = info.commit;
  res.snapshot_dir = rc.snapshot_dir(info.commit);
  std::vector<std::string> paths;
  for (const RepoFile& f : info.files) paths.push_back(f.path);

  std::vector<std::string> wanted, absent_meta;
  const bool pipeline = ref.file.empty() && !info.find("config.json") && info.find("model_index.json");
  if (!ref.file.empty()) {
    wanted = match_files(paths, ref.file, ref.repo_id);
  } else if (pipeline) {
    PipelinePlan plan = pipeline_plan(paths);
    ensure_writable(rc);
    // The indexes first: they say which shards make each part.
    for (const std::string& idx : plan.indexes) {
      if (!rc.has_file(info.commit, idx)) {
        res.bytes_downloaded += fetch_file(cfg, rc, ref, info, idx, nullptr);
        res.files_downloaded++;
      }
      for (const std::string& sh : shards_beside(idx, read_file(rc.file_path(info.commit, idx)), ref.repo_id + ": " + idx)) {
        if (!info.find(sh)) fail("{}: {} names the shard {}, which the repository does not have", ref.repo_id, idx, sh);
        wanted.push_back(sh);
      }
      wanted.push_back(idx);
    }
    wanted.insert(wanted.end(), plan.files.begin(), plan.files.end());
    if (!info.find("unet/config.json"))
      fail("{} has model_index.json but no unet/config.json: not a Stable Diffusion pipeline kvad paints with", ref.repo_id);
  } else {
    if (!info.find("config.json")) {
      std::vector<std::string> ggufs = weight_files_of(paths);
      if (!ggufs.empty())
        fail("{} has no config.json: it holds GGUF files ({}); pull one by name or quantisation, e.g. kvad pull {}:{}",
             ref.repo_id, list_some(ggufs), ref.repo_id, ggufs[0]);
      fail("{} has no config.json, so it is not a model kvad can run (files: {})", ref.repo_id, list_some(paths));
    }
    for (const std::string& m : model_meta_files())
      (info.find(m) ? wanted : absent_meta).push_back(m);
    if (!info.find(kIndex) && !info.find(kSingle)) {
      std::vector<std::string> weights;
      for (const std::string& p : paths)
        if (p.ends_with(".bin") || p.ends_with(".pt") || p.ends_with(".pth") || p.ends_with(".h5") ||
            p.ends_with(".msgpack") || p.ends_with(".safetensors") || ends_with_ignoring_case(p, ".gguf"))
          weights.push_back(p);
      fail("{} has no {} or {}: kvad reads safetensors weights (weight files there: {})", ref.repo_id, kSingle, kIndex,
           list_some(weights));
    }
  }
  ensure_writable(rc);

  // The index comes first: it says which shards make the model.
  bool index_fetched = false;
  if (pipeline) {
  } else if (ref.file.empty() && info.find(kIndex)) {
    if (!rc.has_file(info.commit, kIndex)) {
      res.bytes_downloaded += fetch_file(cfg, rc, ref, info, kIndex, nullptr);
      res.files_downloaded++;
      index_fetched = true;
    }
    std::string index_path = rc.file_path(info.commit, kIndex);
    for (const std::string& s : parse_index_shards(read_file(index_path), ref.repo_id + ": " + kIndex)) {
      if (!info.find(s)) fail("{}: {} names the shard {}, which the repository does not have", ref.repo_id, kIndex, s);
      wanted.push_back(s);
    }
    wanted.push_back(kIndex);
  } else if (ref.file.empty()) {
    wanted.push_back(kSingle);
  }

  std::vector<std::pair<std::string, uint64_t>> todo;
  if (index_fetched) {  // shown as the first file of the plan, already done
    const RepoFile* f = info.find(kIndex);
    todo.emplace_back(kIndex, f && f->size ? *f->size : 0);
  }
  for (const std::string& p : wanted) {
    const RepoFile* f = info.find(p);
    uint64_t size = f && f->size ? *f->size : 0;
    res.bytes_total += size;
    if (!rc.has_file(info.commit, p)) todo.emplace_back(p, size);
  }
  if (progress) progress->plan(todo);
  if (index_fetched) {
    if (progress) {
      progress->file_started(kIndex, todo[0].second, 0);
      progress->file_done(kIndex);
    }
    todo.erase(todo.begin());
  }
  for (const auto& [p, size] : todo) {
    uint64_t n = fetch_file(cfg, rc, ref, info, p, progress);
    res.bytes_downloaded += n;
    res.files_downloaded++;
  }
  for (const std::string& m : absent_meta) rc.mark_no_exist(info.commit, m);
  res.files = wanted;
  // Last: from now on the revision names this snapshot, which is complete.
  rc.write_ref(ref.revision, info.commit);
  return res;
}

}  // namespace kvad::hf
