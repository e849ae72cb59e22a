// libFuzzer: arbitrary bytes sent on a connection to an in-process `kvad serve` (no model): HTTP
// framing through cpp-httplib's parser and kvad's pre-routing checks (Host, Origin, framing,
// content type, keys) and routes. The server must answer or close, and keep serving: after
// every input a well-formed GET /health must still get its 200.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

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
    auto* s = new kvad::serve::Server(o);
    int bound = s->start();
    std::thread([s] { s->run(); }).detach();
    return bound;
  }();
  return p;
}

// Sends bytes and reads the answer. An input without a whole header block is followed by a
// half-close: the server sees end of stream, answers or closes, and recv returns at once. (A
// whole request is not half-closed: httplib drops a request whose client has shut its sending
// side before the answer.) A whole request is read until the answer stops arriving: `first_ms`
// for the first bytes, then `idle_ms` of quiet (keep-alive keeps the socket open).
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
  if (connect(fd, (sockaddr*)&a, sizeof a) != 0) {
    std::perror("fuzz_http: connect");
    std::abort();
  }
  (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  bool whole = bytes.find("\r\n\r\n") != std::string::npos || bytes.find("\n\n") != std::string::npos;
  if (!whole) shutdown(fd, SHUT_WR);
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int wait = out.empty() ? first_ms : idle_ms;
    if (poll(&p, 1, wait) <= 0) break;
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, (size_t)n);
  }
  close(fd);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  exchange(std::string(reinterpret_cast<const char*>(data), size), 2500, 5);
  std::string r = exchange("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 5000, 5000);
  if (r.rfind("HTTP/1.1 200", 0) != 0) {  // the server stopped serving
    std::fprintf(stderr, "health after the input: %.300s\n", r.c_str());
    std::abort();
  }
  return 0;
}
