// An in-process kvad server on a free port, run on its own thread for the test's lifetime: the
// real HTTP server, driven by a real client.
#pragma once
#include <httplib.h>

#include <thread>

#include "serve/server.h"

namespace kvad::test {

struct RunningServer {
  explicit RunningServer(serve::ServeOptions o) : server(std::move(o)) {
    port = server.start();
    thread = std::thread([this] { server.run(); });
  }
  ~RunningServer() {
    server.stop();
    thread.join();
  }
  httplib::Client client(time_t read_timeout_s = 120) const {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(5);
    c.set_read_timeout(read_timeout_s);
    return c;
  }
  serve::Server server;
  int port = 0;
  std::thread thread;
};

}  // namespace kvad::test
