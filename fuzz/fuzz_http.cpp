// libFuzzer: arbitrary bytes sent on a connection to an in-process `kvad serve` (no model): HTTP
// framing through cpp-httplib's parser and kvad's pre-routing checks (Host, Origin, framing,
// content type, keys) and routes. The server must answer or close, and keep serving: after
// every input a well-formed GET /health must still get its 200.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "serve/server.h"

namespace {

int port() {
  static int p = [] {
    kvad::serve::ServeOptions o;
    o.port = 0;
    o.log_level = kvad::serve::LogLevel::Error;
    o.http_threads = 8;
    o.max_body = 1 << 16;
    o.request_seconds = 2;
    // Pull and training jobs run the kvad binary as a child: here that is this fuzzer, which would
    // start fuzzing again with the job's arguments. /bin/false makes each job start and fail.
    o.self_exe = "/bin/false";
    auto* s = new kvad::serve::Server(o);
    int bound = s->start();
    std::thread([s] { s->run(); }).detach();
    return bound;
  }();
  return p;
}

// libFuzzer's timeout timer (SIGALRM, every -timeout/2 seconds) interrupts blocking calls: each
// call below retries on EINTR, else a tick during connect() or poll() reads as a dead server.
void connect_retrying(int fd, const sockaddr_in& a) {
  if (connect(fd, (const sockaddr*)&a, sizeof a) == 0) return;
  if (errno == EINTR) {  // the connection goes on in the background: wait for it and read its result
    pollfd p{fd, POLLOUT, 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) return;
    errno = err;
  }
  std::perror("fuzz_http: connect");
  std::abort();
}

void send_all(int fd, const std::string& bytes) {
  for (size_t at = 0; at < bytes.size();) {
    ssize_t n = send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the server closed: what it sent back is still read
    at += (size_t)n;
  }
}

// Waits up to `ms` for bytes (or end of stream); a signal does not shorten the wait.
bool wait_readable(int fd, int ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, (int)std::max<int64_t>(0, left.count()));
    if (r > 0) return true;
    if (r == 0 || errno != EINTR) return false;
  }
}

// Sends bytes and reads the answer. An input without a whole header block is followed by a
// half-close: the server sees end of stream, answers or closes, and recv returns at once. (A
// whole request is not half-closed: httplib drops a request whose client has shut its sending
// side before the answer.) A whole request is read until the answer stops arriving: `first_ms`
// for the first bytes, then `idle_ms` of quiet (keep-alive keeps the socket open; 1 ms: the
// answer's parts come back to back, and a longer wait left the fuzzer idle most of the time).
std::string exchange(const std::string& bytes, int first_ms, int idle_ms) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Closed with a reset, not a FIN: at ~800 connections a second, client-side TIME_WAIT would use
  // up the ephemeral ports in half a minute and connect() would fail (EADDRNOTAVAIL).
  linger reset{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  connect_retrying(fd, a);
  send_all(fd, bytes);
  // httplib ends a header block only at an empty CRLF line (bare-LF lines are skipped), so "\n\n"
  // alone is not whole: waiting on it cost the read timeout (2 s) and ran the target at ~25 inputs/s.
  bool whole = bytes.find("\r\n\r\n") != std::string::npos;
  if (!whole) shutdown(fd, SHUT_WR);
  std::string out;
  char buf[4096];
  while (wait_readable(fd, out.empty() ? first_ms : idle_ms)) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, (size_t)n);
  }
  close(fd);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  exchange(std::string(reinterpret_cast<const char*>(data), size), 2500, 1);
  std::string r = exchange("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 5000, 5000);
  if (r.rfind("HTTP/1.1 200", 0) != 0) {  // the server stopped serving
    std::fprintf(stderr, "health after the input: %.300s\n", r.c_str());
    std::abort();
  }
  return 0;
}
