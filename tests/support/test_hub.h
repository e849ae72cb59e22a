// A stand-in for the Hugging Face Hub, in the test process, on loopback only: two HTTP/1.1 servers
// on 127.0.0.1 with free ports, "hub" (the API and /resolve/ endpoints) and "cdn" (the file host
// the Hub redirects LFS files to). It imitates what kvad relies on:
//   GET  /api/models/ORG/NAME/revision/REV?blobs=true   {"id","sha","siblings":[{rfilename,size,blobId,lfs}]}
//   HEAD|GET /ORG/NAME/resolve/REV/PATH                 small files: 200 + ETag (git sha1) + X-Repo-Commit
//                                                        LFS files: 302 to the cdn + X-Linked-Etag (sha256),
//                                                        X-Linked-Size, X-Repo-Commit
//   GET  cdn /lfs/SHA256                                  200, or 206 for "Range: bytes=N-", 416 past the end
//   errors as the Hub sends them: 401 + X-Error-Code RepoNotFound (unknown or private repo),
//   401/403 GatedRepo, 404 RevisionNotFound / EntryNotFound, with X-Error-Message.
// and misbehaves on request: cut a transfer off after N bytes, serve bytes that do not match the
// hash, stall the API, trickle a file slowly. Every request is logged for the tests to inspect.
// (Written in C++ rather than as a Python script so that it runs in-process under ASan, needs no
// interpreter, and lets a test read its request log and change its behaviour between calls.)
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "io/hashing.h"

namespace kvad::test {

struct HubFile {
  std::string bytes;
  bool lfs = false;
};

class TestHub {
 public:
  struct Request {
    std::string server;  // "hub" or "cdn"
    std::string method, path, range, authorization;
  };

  TestHub() {
    hub_.fd = listen_on(&hub_.port);
    cdn_.fd = listen_on(&cdn_.port);
    hub_.thread = std::thread([this] { serve(hub_, true); });
    cdn_.thread = std::thread([this] { serve(cdn_, false); });
  }
  ~TestHub() {
    stopping_ = true;
    hub_.thread.join();
    cdn_.thread.join();
    ::close(hub_.fd);
    ::close(cdn_.fd);
    std::vector<std::thread> ts;
    {
      std::lock_guard<std::mutex> l(mu_);
      ts.swap(workers_);
    }
    for (auto& t : ts) t.join();
  }
  TestHub(const TestHub&) = delete;
  TestHub& operator=(const TestHub&) = delete;

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_.port); }
  std::string cdn() const { return "http://127.0.0.1:" + std::to_string(cdn_.port); }

  // A commit of `repo` holding `files`; `branch` (if any) points at it. Returns the commit hash.
  std::string add_commit(const std::string& repo, const std::map<std::string, HubFile>& files,
                         const std::string& branch = "main") {
    std::lock_guard<std::mutex> l(mu_);
    std::string seed = repo + std::to_string(commit_counter_++);
    for (auto& [p, f] : files) seed += p + sha256_hex(f.bytes);
    std::string commit = sha256_hex(seed).substr(0, 40);
    Repo& r = repos_[repo];
    r.commits[commit] = files;
    if (!branch.empty()) r.branches[branch] = commit;
    for (auto& [p, f] : files)
      if (f.lfs) blobs_[sha256_hex(f.bytes)] = f.bytes;
    return commit;
  }
  // Private: only "Bearer <token>" sees it (others get 401 RepoNotFound, as on the Hub).
  void set_private(const std::string& repo, const std::string& token) {
    std::lock_guard<std::mutex> l(mu_);
    repos_[repo].private_token = token;
  }
  // Gated: no token -> 401 GatedRepo; a token without access -> 403 GatedRepo.
  void set_gated(const std::string& repo, const std::string& token_with_access) {
    std::lock_guard<std::mutex> l(mu_);
    repos_[repo].gated_token = token_with_access;
  }
  // The next `times` cdn transfers of this blob stop after the file's byte `at` (connection closed).
  void cut_after(const std::string& sha256, uint64_t at, int times = 1) {
    std::lock_guard<std::mutex> l(mu_);
    cuts_[sha256] = {at, times};
  }
  // Serve this blob with one byte changed (its headers still claim the real hash).
  void corrupt(const std::string& sha256, bool on = true) {
    std::lock_guard<std::mutex> l(mu_);
    if (on) corrupt_.insert(sha256);
    else corrupt_.erase(sha256);
  }
  // Send this blob `chunk` bytes at a time, `interval_ms` apart (0 = normal speed).
  void trickle(const std::string& sha256, size_t chunk, int interval_ms) {
    std::lock_guard<std::mutex> l(mu_);
    if (interval_ms <= 0) trickle_.erase(sha256);
    else trickle_[sha256] = {chunk, interval_ms};
  }
  // Hold every API / HEAD answer of the hub this long (a server that does not answer).
  void set_hub_delay_ms(int ms) { hub_delay_ms_ = ms; }
  void set_ignore_range(bool on) { ignore_range_ = on; }

  std::vector<Request> requests() const {
    std::lock_guard<std::mutex> l(mu_);
    return log_;
  }
  void clear_requests() {
    std::lock_guard<std::mutex> l(mu_);
    log_.clear();
  }
  uint64_t cdn_bytes_sent() const { return cdn_bytes_; }
  int count(const std::string& server, const std::string& method, const std::string& path_part = "") const {
    int n = 0;
    for (const Request& r : requests())
      if (r.server == server && r.method == method && r.path.find(path_part) != std::string::npos) n++;
    return n;
  }

  static std::string random_bytes(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::string s(n, '\0');
    for (char& c : s) c = (char)(rng() & 0xff);
    return s;
  }

 private:
  struct Server {
    int fd = -1;
    int port = 0;
    std::thread thread;
  };
  struct Repo {
    std::map<std::string, std::map<std::string, HubFile>> commits;
    std::map<std::string, std::string> branches;
    std::string private_token, gated_token;
  };
  struct Cut {
    uint64_t at;
    int times;
  };
  struct Trickle {
    size_t chunk;
    int interval_ms;
  };
  struct Http {
    std::string method, target, path, query;
    std::map<std::string, std::string> headers;  // lower-case names
  };

  static int listen_on(int* port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (::bind(fd, (sockaddr*)&a, sizeof a) != 0 || ::listen(fd, 64) != 0) std::abort();
    socklen_t len = sizeof a;
    ::getsockname(fd, (sockaddr*)&a, &len);
    *port = ntohs(a.sin_port);
    return fd;
  }

  void serve(Server& s, bool is_hub) {
    while (!stopping_) {
      pollfd p{s.fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      int c = ::accept4(s.fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      std::lock_guard<std::mutex> l(mu_);
      workers_.emplace_back([this, c, is_hub] {
        handle(c, is_hub);
        ::close(c);
      });
    }
  }

  bool send_all(int c, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += (size_t)n;
    }
    return true;
  }

  static std::string decode(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
      if (s[i] == '%' && i + 2 < s.size()) {
        out.push_back((char)std::stoi(s.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        out.push_back(s[i]);
      }
    }
    return out;
  }

  bool read_request(int c, Http& h) {
    std::string buf;
    char tmp[4096];
    while (buf.find("\r\n\r\n") == std::string::npos) {
      pollfd p{c, POLLIN, 0};
      if (::poll(&p, 1, 5000) <= 0) return false;
      ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n <= 0) return false;
      buf.append(tmp, (size_t)n);
      if (buf.size() > 65536) return false;
    }
    size_t eol = buf.find("\r\n");
    std::string line = buf.substr(0, eol);
    size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
    if (sp1 == std::string::npos || sp2 <= sp1) return false;
    h.method = line.substr(0, sp1);
    h.target = line.substr(sp1 + 1, sp2 - sp1 - 1);
    size_t q = h.target.find('?');
    h.path = h.target.substr(0, q);
    if (q != std::string::npos) h.query = h.target.substr(q + 1);
    size_t pos = eol + 2;
    while (true) {
      size_t e = buf.find("\r\n", pos);
      if (e == pos || e == std::string::npos) break;
      std::string hl = buf.substr(pos, e - pos);
      size_t colon = hl.find(':');
      if (colon != std::string::npos) {
        std::string name = hl.substr(0, colon);
        for (char& ch : name) ch = (char)std::tolower((unsigned char)ch);
        std::string v = hl.substr(colon + 1);
        while (!v.empty() && v.front() == ' ') v.erase(v.begin());
        h.headers[name] = v;
      }
      pos = e + 2;
    }
    return true;
  }

  static std::string reason(int status) {
    switch (status) {
      case 200: return "OK";
      case 206: return "Partial Content";
      case 302: return "Found";
      case 401: return "Unauthorized";
      case 403: return "Forbidden";
      case 404: return "Not Found";
      case 416: return "Range Not Satisfiable";
      default: return "Status";
    }
  }

  // Headers (with Content-Length = body size, or `length` when the body is streamed separately).
  bool respond(int c, const Http& h, int status, std::vector<std::pair<std::string, std::string>> headers,
               const std::string& body, int64_t length = -1) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
    for (auto& [k, v] : headers) out += k + ": " + v + "\r\n";
    out += "Content-Length: " + std::to_string(length >= 0 ? (uint64_t)length : body.size()) + "\r\n";
    out += "Connection: close\r\n\r\n";
    if (h.method != "HEAD") out += body;
    return send_all(c, out);
  }

  bool error(int c, const Http& h, int status, const std::string& code, const std::string& msg,
             std::vector<std::pair<std::string, std::string>> extra = {}) {
    extra.emplace_back("X-Error-Code", code);
    extra.emplace_back("X-Error-Message", msg);
    extra.emplace_back("Content-Type", "application/json");
    return respond(c, h, status, extra, nlohmann::json{{"error", msg}}.dump());
  }

  void sleep_ms(int ms) {
    for (int i = 0; i < ms / 10 && !stopping_; i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // Access check as the Hub does it: returns false after answering with the error.
  bool check_access(int c, const Http& h, const Repo& r, const std::string& repo) {
    std::string auth = h.headers.count("authorization") ? h.headers.at("authorization") : "";
    if (!r.private_token.empty() && auth != "Bearer " + r.private_token) {
      error(c, h, 401, "RepoNotFound", "Repository not found");
      return false;
    }
    if (!r.gated_token.empty() && auth != "Bearer " + r.gated_token) {
      if (auth.empty())
        error(c, h, 401, "GatedRepo", "Access to model " + repo + " is restricted. You must be authenticated to access it.");
      else
        error(c, h, 403, "GatedRepo", "Access to model " + repo + " is restricted and you are not in the authorized list.");
      return false;
    }
    return true;
  }

  void handle(int c, bool is_hub) {
    Http h;
    if (!read_request(c, h)) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      Request r{is_hub ? "hub" : "cdn", h.method, decode(h.path), "", ""};
      if (h.headers.count("range")) r.range = h.headers["range"];
      if (h.headers.count("authorization")) r.authorization = h.headers["authorization"];
      log_.push_back(r);
    }
    if (is_hub) {
      if (hub_delay_ms_ > 0) sleep_ms(hub_delay_ms_);
      handle_hub(c, h);
    } else {
      handle_cdn(c, h);
    }
  }

  // Splits "/ORG/NAME/<rest>" -> repo, rest.
  static bool split_repo(const std::string& p, std::string& repo, std::string& rest) {
    size_t a = p.find('/', 1);
    if (a == std::string::npos) return false;
    size_t b = p.find('/', a + 1);
    repo = p.substr(1, b == std::string::npos ? std::string::npos : b - 1);
    rest = b == std::string::npos ? "" : p.substr(b + 1);
    return true;
  }

  void handle_hub(int c, const Http& h) {
    std::string repo, rest;
    const std::string api = "/api/models";
    bool is_api = h.path.rfind(api + "/", 0) == 0;
    if (!split_repo(is_api ? h.path.substr(api.size()) : h.path, repo, rest)) {
      error(c, h, 404, "", "Not found");
      return;
    }
    std::unique_lock<std::mutex> l(mu_);
    auto it = repos_.find(repo);
    if (it == repos_.end()) {
      l.unlock();
      error(c, h, 401, "RepoNotFound", "Repository not found");
      return;
    }
    Repo r = it->second;  // a copy: answer without the lock
    l.unlock();
    if (!check_access(c, h, r, repo)) return;
    // rest: "revision/REV" (api) or "resolve/REV/PATH"
    std::string rev, file;
    if (is_api) {
      if (rest.empty()) rev = "main";
      else if (rest.rfind("revision/", 0) == 0) rev = decode(rest.substr(9));
      else return (void)error(c, h, 404, "", "Not found");
    } else {
      if (rest.rfind("resolve/", 0) != 0) return (void)error(c, h, 404, "", "Not found");
      std::string rr = rest.substr(8);
      size_t slash = rr.find('/');
      if (slash == std::string::npos) return (void)error(c, h, 404, "", "Not found");
      rev = decode(rr.substr(0, slash));
      file = decode(rr.substr(slash + 1));
    }
    std::string commit;
    if (r.branches.count(rev)) commit = r.branches[rev];
    else if (r.commits.count(rev)) commit = rev;
    else return (void)error(c, h, 404, "RevisionNotFound", "Invalid rev id: " + rev);
    const auto& files = r.commits[commit];
    if (is_api) {
      nlohmann::json sib = nlohmann::json::array();
      for (auto& [p, f] : files) {
        nlohmann::json e = {{"rfilename", p}, {"size", f.bytes.size()}, {"blobId", git_blob_sha1_hex(f.bytes)}};
        if (f.lfs) e["lfs"] = {{"sha256", sha256_hex(f.bytes)}, {"size", f.bytes.size()}, {"pointerSize", 134}};
        sib.push_back(e);
      }
      nlohmann::json j = {{"_id", "0123"}, {"id", repo}, {"modelId", repo}, {"sha", commit}, {"private", !r.private_token.empty()},
                          {"gated", r.gated_token.empty() ? nlohmann::json(false) : nlohmann::json("manual")},
                          {"siblings", sib}};
      respond(c, h, 200, {{"Content-Type", "application/json"}}, j.dump());
      return;
    }
    auto f = files.find(file);
    if (f == files.end()) {
      error(c, h, 404, "EntryNotFound", file + " does not exist on \"" + rev + "\"", {{"X-Repo-Commit", commit}});
      return;
    }
    if (f->second.lfs) {
      std::string sha = sha256_hex(f->second.bytes);
      respond(c, h, 302,
              {{"Location", cdn() + "/lfs/" + sha + "?sig=test&file=" + file},
               {"X-Linked-Etag", "\"" + sha + "\""},
               {"X-Linked-Size", std::to_string(f->second.bytes.size())},
               {"X-Repo-Commit", commit},
               {"ETag", "\"" + git_blob_sha1_hex("pointer " + sha) + "\""}},
              "Found. Redirecting to the file host");
      return;
    }
    respond(c, h, 200, {{"ETag", "\"" + git_blob_sha1_hex(f->second.bytes) + "\""}, {"X-Repo-Commit", commit},
                        {"Accept-Ranges", "bytes"}},
            f->second.bytes);
  }

  void handle_cdn(int c, const Http& h) {
    if (h.path.rfind("/lfs/", 0) != 0) return (void)respond(c, h, 404, {}, "no such object");
    std::string sha = h.path.substr(5);
    std::unique_lock<std::mutex> l(mu_);
    auto it = blobs_.find(sha);
    if (it == blobs_.end()) {
      l.unlock();
      respond(c, h, 404, {}, "no such object");
      return;
    }
    std::string bytes = it->second;
    if (corrupt_.count(sha) && !bytes.empty()) bytes[bytes.size() / 2] ^= 0x5a;
    Cut cut{UINT64_MAX, 0};
    if (auto ci = cuts_.find(sha); ci != cuts_.end() && ci->second.times > 0) {
      cut = ci->second;
      ci->second.times--;
    }
    Trickle tr{0, 0};
    if (auto ti = trickle_.find(sha); ti != trickle_.end()) tr = ti->second;
    l.unlock();

    uint64_t start = 0;
    int status = 200;
    std::vector<std::pair<std::string, std::string>> hd = {{"ETag", "\"" + sha + "\""}, {"Accept-Ranges", "bytes"}};
    auto rg = h.headers.find("range");
    if (rg != h.headers.end() && !ignore_range_) {
      start = std::strtoull(rg->second.c_str() + 6, nullptr, 10);  // "bytes=N-"
      if (start >= bytes.size()) {
        respond(c, h, 416, {{"Content-Range", "bytes */" + std::to_string(bytes.size())}}, "");
        return;
      }
      status = 206;
      hd.emplace_back("Content-Range",
                      "bytes " + std::to_string(start) + "-" + std::to_string(bytes.size() - 1) + "/" + std::to_string(bytes.size()));
    }
    uint64_t len = bytes.size() - start;
    if (!respond(c, h, status, hd, "", (int64_t)len) || h.method == "HEAD") return;
    uint64_t end = std::min<uint64_t>(bytes.size(), cut.at > start ? cut.at : start);
    if (cut.at == UINT64_MAX) end = bytes.size();
    size_t chunk = tr.chunk ? tr.chunk : 65536;
    for (uint64_t off = start; off < end && !stopping_;) {
      size_t n = (size_t)std::min<uint64_t>(chunk, end - off);
      if (!send_all(c, bytes.substr(off, n))) return;
      cdn_bytes_ += n;
      off += n;
      if (tr.interval_ms) sleep_ms(tr.interval_ms);
    }
    // A cut: close with bytes still owed (the client sees a short body).
  }

  Server hub_, cdn_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> hub_delay_ms_{0};
  std::atomic<bool> ignore_range_{false};
  std::atomic<uint64_t> cdn_bytes_{0};
  mutable std::mutex mu_;
  std::vector<std::thread> workers_;
  std::map<std::string, Repo> repos_;
  std::map<std::string, std::string> blobs_;
  std::map<std::string, Cut> cuts_;
  std::map<std::string, Trickle> trickle_;
  std::set<std::string> corrupt_;
  std::vector<Request> log_;
  int commit_counter_ = 0;
};

}  // namespace kvad::test
