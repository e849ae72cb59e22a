// libFuzzer: arbitrary bytes sent on a connection to an in-process `kvad serve` (no model): HTTP
// framing through cpp-httplib's parser and kvad's pre-routing checks (Host, Origin, framing,
// content type, keys) and routes. The server must answer or close, and keep serving: after
// every input a well-formed GET /health must still get its 200.
#include <arpa/inet.h>
#include <netinet/in.h>
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
    o.quiet = true;
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

// Sends bytes and reads until the server closes or `wait_ms` passes. (No half-close: httplib
// drops a request whose client has shut its sending side before the answer.)
std::string exchange(const std::string& bytes, int wait_ms) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (sockaddr*)&a, sizeof a) != 0) std::abort();
  timeval tv{wait_ms / 1000, (wait_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, (size_t)n);
  close(fd);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  exchange(std::string(reinterpret_cast<const char*>(data), size), 50);
  std::string r = exchange("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 5000);
  if (r.rfind("HTTP/1.1 200", 0) != 0) {  // the server stopped serving
    std::fprintf(stderr, "health after the input: %.300s\n", r.c_str());
    std::abort();
  }
  return 0;
}
