// kvad serve under hostile clients (issue 9): slow clients cannot lock others out; bodies are
// bounded whatever their framing; a web page elsewhere cannot drive the server (Host, Origin,
// content type); the UI cannot be framed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/json.h"
#include "running_server.h"
#include "serve/server.h"

using namespace kvad;
using namespace std::chrono_literals;

namespace {

using Running = test::RunningServer;

serve::ServeOptions hardening_options() {  // no model: the routes answer without one
  serve::ServeOptions o;
  o.port = 0;
  o.log_level = kvad::serve::LogLevel::Error;
  o.http_threads = 8;
  o.shutdown_grace = 0.1;
  return o;
}

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (sockaddr*)&a, sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TEST(ServeHardening, SlowClientsDoNotLockOthersOut) {
  serve::ServeOptions o = hardening_options();
  o.request_seconds = 2;
  Running s(o);
  // 40 connections (5x the workers) trickling header bytes: each would hold a worker for ever.
  std::vector<int> slow;
  for (int i = 0; i < 40; i++) {
    int fd = connect_to(s.port);
    ASSERT_GE(fd, 0);
    (void)!write(fd, "GET /health HTTP/1.1\r\nX-A: ", 27);
    slow.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    while (!stop) {
      for (int fd : slow) (void)!send(fd, "a", 1, MSG_NOSIGNAL);
      std::this_thread::sleep_for(200ms);
    }
  });
  std::this_thread::sleep_for(1500ms);  // the tricklers are now older than the eviction grace (1 s)
  auto t0 = std::chrono::steady_clock::now();
  auto c = s.client(10);
  auto r = c.Get("/health");
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stop = true;
  trickle.join();
  ASSERT_TRUE(r) << "a normal request was locked out";
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(took, 5.0);  // unguarded, it waits for ever: the tricklers never let a recv() time out
  // Every trickler is cut by its deadline or evicted, never served for ever.
  std::vector<bool> closed(slow.size(), false);
  size_t n_closed = 0;
  auto t1 = std::chrono::steady_clock::now();
  while (n_closed < slow.size() && std::chrono::steady_clock::now() - t1 < 15s) {
    for (size_t i = 0; i < slow.size(); i++) {
      if (closed[i]) continue;
      char buf[256];
      ssize_t n = recv(slow[i], buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) closed[i] = true, n_closed++;
    }
    std::this_thread::sleep_for(100ms);
  }
  for (int fd : slow) close(fd);
  EXPECT_EQ(n_closed, slow.size()) << "trickling connections must be closed by the server";
}

TEST(ServeHardening, BodiesAreBoundedWhateverTheFraming) {
  serve::ServeOptions o = hardening_options();
  o.max_body = 4096;
  o.request_seconds = 1;  // httplib reads a too-long declared body until its read timeout, then says 413
  Running s(o);
  // Chunked: refused before a byte is read (it used to be read whole, past --max-body).
  int fd = connect_to(s.port);
  std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Transfer-Encoding: chunked\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  char buf[4096];
  ssize_t n = recv(fd, buf, sizeof buf - 1, 0);
  ASSERT_GT(n, 0);
  buf[n] = 0;
  EXPECT_NE(std::string(buf).find("411"), std::string::npos) << buf;
  close(fd);
  // gzip: a small body could inflate to gigabytes.
  auto c = s.client(10);
  httplib::Headers h = {{"Content-Encoding", "gzip"}};
  auto r = c.Post("/v1/completions", h, std::string(100, 'x'), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415);
  // A declared length past any body (2^64 - 1): 413. (The connection's deadline once got
  // that many bytes' worth of seconds, a double out of range of the clock: UBSan in fuzz_http.)
  for (const char* length : {"18446744073709551615", "4097"}) {
    fd = connect_to(s.port);
    req = std::string("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n") +
          "Content-Length: " + length + "\r\n\r\n{}";
    (void)!write(fd, req.data(), req.size());
    n = recv(fd, buf, sizeof buf - 1, 0);
    ASSERT_GT(n, 0) << length;
    buf[n] = 0;
    EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 413", 0), 0u) << length << ": " << buf;
    close(fd);
  }
}

TEST(ServeHardening, CrossSiteAndRebindingAreRefused) {
  Running s(hardening_options());
  auto c = s.client(10);
  std::string body = R"({"prompt":"x"})";
  // A foreign page's text/plain POST (no preflight needed in a browser).
  httplib::Headers foreign = {{"Origin", "http://evil.example"}};
  auto r = c.Post("/kvad/unload", foreign, "", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403) << r->body;
  r = c.Post("/v1/completions", foreign, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  // A JSON body must say so.
  r = c.Post("/v1/completions", body, "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415);
  // DNS rebinding: the Host is the attacker's name.
  httplib::Headers rebound = {{"Host", "evil.example"}};
  r = c.Delete("/kvad/models/x", rebound);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 421);
  // Same origin (the UI) and plain API clients (no Origin) pass the checks.
  httplib::Headers same = {{"Origin", "http://127.0.0.1:" + std::to_string(s.port)}};
  r = c.Post("/v1/completions", same, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_NE(r->status, 403);
  EXPECT_NE(r->status, 421);
  EXPECT_TRUE(r->get_header_value("Access-Control-Allow-Origin").empty()) << "CORS only for --cors origins";
  // The UI is not frameable and runs only its own scripts.
  r = c.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("X-Frame-Options"), "DENY");
  EXPECT_NE(r->get_header_value("Content-Security-Policy").find("frame-ancestors 'none'"), std::string::npos);
}

TEST(ServeHardening, WildcardCorsAnswersAStarNotTheOrigin) {
  serve::ServeOptions o = hardening_options();
  o.cors_origins = {"*"};
  Running s(o);
  auto c = s.client(10);
  httplib::Headers pre = {{"Origin", "https://any.example"}, {"Access-Control-Request-Method", "POST"}};
  auto r = c.Options("/v1/chat/completions", pre);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  // Reflecting the origin would let a credentialed request read the answer; "*" never does.
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_TRUE(r->get_header_value("Access-Control-Allow-Credentials").empty());
}

TEST(ServeHardening, ConfiguredCorsOriginsAndKeys) {
  serve::ServeOptions o = hardening_options();
  o.cors_origins = {"https://app.example"};
  o.api_key = "secret-key";
  Running s(o);
  auto c = s.client(10);
  httplib::Headers pre = {{"Origin", "https://app.example"}, {"Access-Control-Request-Method", "POST"}};
  auto r = c.Options("/v1/chat/completions", pre);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 204);
  EXPECT_EQ(r->get_header_value("Access-Control-Allow-Origin"), "https://app.example");
  httplib::Headers other = {{"Origin", "https://other.example"}};
  r = c.Options("/v1/chat/completions", other);
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->get_header_value("Access-Control-Allow-Origin").empty());
  // The key guards every API, the UI's, Ollama's and llama-server's included; a wrong key of the
  // right length is refused.
  for (const char* path : {"/kvad/models", "/api/tags", "/api/ps", "/props", "/slots"}) {
    r = c.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401) << path;
  }
  r = c.Post("/tokenize", R"({"content":"x"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  c.set_bearer_token_auth("secret-kez");
  r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  c.set_bearer_token_auth("secret-key");
  r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

// A burst of clients connecting at once (a load test, a pool opening, a proxy after a restart) is
// served, not reset: the listen backlog holds them while the accept loop catches up. httplib 0.11
// listens with a backlog of 5, and 2 of 32 benchmark clients failed with a read error.
TEST(ServeHardening, ABurstOfConnectionsIsServed) {
  serve::ServeOptions o = hardening_options();
  o.http_threads = 64;
  o.pending_per_client = 64;
  Running s(o);
  const int n = 48;
  std::vector<int> fds;
  for (int i = 0; i < n; i++) {  // all connected before any request is sent
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)s.port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::connect(fd, (sockaddr*)&a, sizeof a), 0);
    fds.push_back(fd);
  }
  std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  for (int fd : fds) ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), (ssize_t)req.size());
  int ok = 0;
  for (int fd : fds) {
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[64] = {0};
    ssize_t got = ::recv(fd, buf, sizeof buf - 1, 0);
    if (got > 0 && std::string(buf).rfind("HTTP/1.1 200", 0) == 0) ok++;
    ::close(fd);
  }
  EXPECT_EQ(ok, n);
}

TEST(ServeHardening, APortInUseIsAnErrorNotASecondListener) {
  // httplib's default socket options include SO_REUSEPORT, with which a second server on the same
  // port binds "successfully" and the kernel splits clients between the two. kvad refuses instead.
  Running first(hardening_options());
  serve::ServeOptions o = hardening_options();
  o.port = first.port;
  serve::Server second(o);
  try {
    second.start();
    FAIL() << "a second server bound port " << first.port;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("port " + std::to_string(first.port) + " is already in use"), std::string::npos)
        << e.what();
  }
  auto c = first.client();
  auto r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);  // the first one is untouched
}
