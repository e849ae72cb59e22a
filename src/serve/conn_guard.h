// The HTTP server's defence against slow and greedy clients (issue 9). cpp-httplib gives each
// connection a worker thread for its whole life and its read timeout is per recv(), so a client
// trickling one header byte every few seconds held a worker indefinitely, and a few dozen such
// connections locked everyone out. GuardedHttp tracks every connection a worker is serving:
//  - a connection is "pending" from its accept() until it has sent a whole request (headers,
//    then body), including while it waits for a worker and an idle keep-alive connection between
//    requests;
//  - a pending connection gets a deadline (request_seconds, plus time for a declared body at
//    256 KiB/s); past it the watchdog shuts the socket down and the worker is free again;
//  - at most per_client pending connections per client address and total_pending in all: a new
//    one over either cap evicts the oldest pending connection older than a second (so a real request, which sends
//    its headers at once, always gets in, even from the same address as the trickler). A
//    keep-alive connection waiting for its next request counts against the total only: a client
//    with a pool of connections (a proxy, a load test) is not cut between its requests.
// Requests being answered (a generation, a stream) are never pending and never cut.
//
// httplib hands a connection to a worker as an opaque task; its socket is found when the task is
// queued (right after accept(), on the listening thread) as the one socket on our port that is
// not yet known, and a dup of it is what the watchdog shuts down.
#pragma once
#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <list>
#include <vector>
#include <mutex>
#include <string>
#include <thread>

namespace kvad::serve {

class GuardedHttp : public httplib::Server, private httplib::TaskQueue {
 public:
  struct Limits {
    double request_seconds = 10;
    size_t per_client = 8;
    size_t total_pending = 16;
  };
  GuardedHttp();
  ~GuardedHttp() override;
  // Before listening: the limits and the number of worker threads.
  void set_guard_limits(const Limits& l, size_t workers);
  // After binding: the port, and the listen backlog raised from httplib 0.11's fixed 5 to
  // SOMAXCONN, so a burst of clients connecting at once waits in the kernel instead of failing.
  void set_port(int port);

  // Called on the worker's thread: the request's headers are in; `body_bytes` more follow (0:
  // the request is complete).
  static void headers_read(uint64_t body_bytes);
  // The whole request (its body too) has been read.
  static void request_read();
  // The response is written: waiting for the next request on this connection begins.
  static void response_done();
  // On the worker's thread, while answering: true when the client has closed or reset the
  // connection (a non-streaming request has nothing to write until the end to find out by).
  static bool client_gone();

  size_t evicted() const { return evicted_; }

 private:
  // httplib::TaskQueue: our worker pool.
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

  using Clock = std::chrono::steady_clock;
  struct Conn {
    int guard_fd;  // a dup of the socket: shutting it down reaches the socket even after httplib closed its fd
    std::string client, id;
    bool pending = true;
    bool reused = false;  // pending after a response: a keep-alive client's next request
    bool cut = false;
    bool queued = true;   // accepted, waiting for a worker
    Clock::time_point since, deadline;
  };
  // A queued connection whose socket already holds a whole header block is a real request
  // waiting for a worker (behind long streams, say), not a trickler: never cut for waiting.
  static bool request_waiting(const Conn& c);
  void set_pending(Conn* c, bool pending, uint64_t body_bytes);
  int find_new_socket(std::string* peer);  // with mu_ held
  void cut(Conn& c);  // with mu_ held
  void enforce_caps(const std::string& client);
  void watch();

  Limits limits_;
  std::mutex mu_;
  std::condition_variable cv_, watch_cv_;
  std::list<Conn> conns_;
  // A connection is tracked from its accept(), while it waits in the queue for a worker too, so a
  // burst of tricklers queued behind busy workers is cut by its deadlines and the caps like the
  // ones being served (otherwise a real request queued behind them waits for every one in turn).
  struct Task {
    std::function<void()> fn;
    std::list<Conn>::iterator conn;
    bool guarded = false;
  };
  void run_connection(Task& t);
  std::list<Task> queue_;
  std::vector<std::thread> workers_;
  size_t n_workers_ = 8;
  int port_ = 0;
  bool quit_ = false, pool_down_ = false;
  size_t evicted_ = 0;
  std::thread watchdog_;
};

}  // namespace kvad::serve
