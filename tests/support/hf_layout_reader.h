// Reads a Hugging Face cache the way huggingface_hub does, written from its documented rules and
// independently of src/io (it shares no code with kvad's writer):
//   <cache>/models--ORG--NAME/refs/<revision>          the commit (40 hex), no trailing newline
//   <cache>/models--ORG--NAME/snapshots/<commit>/<f>  a relative symlink "../../blobs/<etag>"
//                                                      ("../" once more per folder level of <f>)
//   <cache>/models--ORG--NAME/blobs/<etag>             the bytes; etag = sha256 for LFS files,
//                                                      git blob sha1 ("blob <n>\0" + bytes) otherwise
// Every check failure is reported as a string (empty = fine).
#pragma once
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace kvad::test {

inline std::string hf_digest(const std::string& bytes, bool sha256) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  std::string data = sha256 ? bytes : "blob " + std::to_string(bytes.size()) + std::string(1, '\0') + bytes;
  EVP_Digest(data.data(), data.size(), md, &n, sha256 ? EVP_sha256() : EVP_sha1(), nullptr);
  std::string hex;
  static const char* d = "0123456789abcdef";
  for (unsigned i = 0; i < n; i++) {
    hex += d[md[i] >> 4];
    hex += d[md[i] & 15];
  }
  return hex;
}

inline std::string hf_slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct HfLayoutReader {
  std::string cache, repo_id;

  std::string repo_dir() const {
    std::string name = repo_id;
    std::string folder = "models";
    size_t start = 0;
    while (true) {
      size_t s = name.find('/', start);
      folder += "--" + name.substr(start, s == std::string::npos ? std::string::npos : s - start);
      if (s == std::string::npos) break;
      start = s + 1;
    }
    return cache + "/" + folder;
  }

  // The commit huggingface_hub would use for `revision` (refs/ lookup unless it is a commit).
  std::string commit_for(const std::string& revision, std::string* err) const {
    bool hex = revision.size() == 40 && revision.find_first_not_of("0123456789abcdef") == std::string::npos;
    if (hex) return revision;
    std::string ref = hf_slurp(repo_dir() + "/refs/" + revision);
    if (ref.size() != 40 || ref.find_first_not_of("0123456789abcdef") != std::string::npos)
      *err = "refs/" + revision + " does not hold exactly a 40-hex commit: '" + ref + "'";
    return ref;
  }

  // Checks one file of a snapshot and returns its bytes through the link.
  std::string check_file(const std::string& commit, const std::string& path, bool lfs, std::string* err) const {
    std::string link = repo_dir() + "/snapshots/" + commit + "/" + path;
    struct stat st {};
    if (::lstat(link.c_str(), &st) != 0) return *err = path + ": not in the snapshot", "";
    if (!S_ISLNK(st.st_mode)) return *err = path + ": not a symlink", "";
    char buf[4096];
    ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
    if (n <= 0) return *err = path + ": unreadable link", "";
    std::string target(buf, (size_t)n);
    std::string expect;
    for (char c : path)
      if (c == '/') expect += "../";
    expect += "../../blobs/";
    if (target.rfind(expect, 0) != 0) return *err = path + ": link '" + target + "' is not '" + expect + "<etag>'", "";
    std::string etag = target.substr(expect.size());
    std::string blob = repo_dir() + "/blobs/" + etag;
    if (::lstat(blob.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return *err = path + ": blob " + etag + " missing", "";
    std::string bytes = hf_slurp(link);
    if (hf_digest(bytes, lfs) != etag)
      return *err = path + ": blob name " + etag + " is not the " + (lfs ? "sha256" : "git sha1") + " of its bytes", "";
    return bytes;
  }
};

}  // namespace kvad::test
