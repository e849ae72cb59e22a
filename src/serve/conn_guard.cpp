#include "serve/conn_guard.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <string_view>

namespace kvad::serve {

namespace {

struct Current {
  GuardedHttp* server = nullptr;
  void* conn = nullptr;
};
thread_local Current t_current;

std::string peer_of(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, (sockaddr*)&ss, &len) != 0) return "?";
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) ::inet_ntop(AF_INET, &((sockaddr_in*)&ss)->sin_addr, buf, sizeof buf);
  else if (ss.ss_family == AF_INET6) ::inet_ntop(AF_INET6, &((sockaddr_in6*)&ss)->sin6_addr, buf, sizeof buf);
  return buf;
}

// The local port of a TCP socket; -1 for anything else.
int local_port(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (::getsockname(fd, (sockaddr*)&local, &len) != 0) return -1;
  return local.ss_family == AF_INET    ? ntohs(((sockaddr_in*)&local)->sin_port)
         : local.ss_family == AF_INET6 ? ntohs(((sockaddr_in6*)&local)->sin6_port)
                                       : -1;
}

}  // namespace

GuardedHttp::GuardedHttp() : watchdog_([this] { watch(); }) {
  // httplib deletes the queue it gets after shutdown(): hand it a forwarder to ourselves.
  struct Forward : httplib::TaskQueue {
    GuardedHttp* g;
    explicit Forward(GuardedHttp* g) : g(g) {}
    void enqueue(std::function<void()> fn) override { static_cast<httplib::TaskQueue*>(g)->enqueue(std::move(fn)); }
    void shutdown() override { static_cast<httplib::TaskQueue*>(g)->shutdown(); }
  };
  new_task_queue = [this] {
    std::lock_guard<std::mutex> l(mu_);
    pool_down_ = false;
    return new Forward(this);
  };
  // httplib's default also sets SO_REUSEPORT: a second server on the same port then binds
  // "successfully" and the kernel splits the connections between the two. SO_REUSEADDR alone
  // still allows a restart while old connections sit in TIME_WAIT.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

GuardedHttp::~GuardedHttp() {
  shutdown();
  {
    std::lock_guard<std::mutex> l(mu_);
    quit_ = true;
  }
  watch_cv_.notify_all();
  watchdog_.join();
}

void GuardedHttp::set_guard_limits(const Limits& l, size_t workers) {
  std::lock_guard<std::mutex> lock(mu_);
  limits_ = l;
  n_workers_ = std::max<size_t>(1, workers);
}

void GuardedHttp::cut(Conn& c) {
  if (c.cut) return;
  c.cut = true;
  ::shutdown(c.guard_fd, SHUT_RDWR);  // the worker's recv() returns at once; httplib closes it
}

bool GuardedHttp::request_waiting(const Conn& c) {
  if (!c.queued) return false;
  char buf[16384];
  ssize_t n = ::recv(c.guard_fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 && std::string_view(buf, (size_t)n).find("\r\n\r\n") != std::string_view::npos;
}

void GuardedHttp::enforce_caps(const std::string& client) {
  for (bool per_client : {true, false}) {
    size_t n = 0;
    auto counts = [&](const Conn& c) {
      return c.pending && !c.cut && (!per_client || (c.client == client && !c.reused)) && !request_waiting(c);
    };
    for (const Conn& c : conns_) n += counts(c);
    size_t cap = per_client ? limits_.per_client : limits_.total_pending;
    // Oldest first, and only connections pending for a while: a burst of new connections (a
    // client opening its pool) is not a trickler, whose connections are old by definition.
    auto grace = Clock::now() - std::chrono::milliseconds(1000);
    for (auto it = conns_.begin(); n > cap && it != conns_.end() && it->since < grace; ++it)
      if (counts(*it)) {
        cut(*it);
        evicted_++;
        n--;
      }
  }
}

void GuardedHttp::set_port(int port) {
  port_ = port;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::string n = e.path().filename().string();
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) continue;
    int fd = std::stoi(n), listening = 0;
    socklen_t len = sizeof listening;
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    if (local_port(fd) == port_) ::listen(fd, SOMAXCONN);  // Linux: listen() again resizes the backlog
  }
}

int GuardedHttp::find_new_socket(std::string* peer) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    std::string n = e.path().filename().string();
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) continue;
    int fd = std::stoi(n);
    if (local_port(fd) != port_) continue;
    std::string p = peer_of(fd);
    if (p == "?") continue;  // the listening socket
    sockaddr_storage rs{};
    socklen_t rl = sizeof rs;
    ::getpeername(fd, (sockaddr*)&rs, &rl);
    int rport = rs.ss_family == AF_INET ? ntohs(((sockaddr_in*)&rs)->sin_port) : ntohs(((sockaddr_in6*)&rs)->sin6_port);
    // The peer's address and port name the connection (our own dups of a socket share them).
    std::string id = p + "#" + std::to_string(rport);
    bool known = false;
    for (const Conn& c : conns_) known = known || c.id == id;
    if (known) continue;
    *peer = id;
    return fd;
  }
  return -1;
}

void GuardedHttp::enqueue(std::function<void()> fn) {
  std::unique_lock<std::mutex> l(mu_);
  if (workers_.empty())
    for (size_t i = 0; i < n_workers_; i++)
      workers_.emplace_back([this] {
        std::unique_lock<std::mutex> lk(mu_);
        for (;;) {
          cv_.wait(lk, [this] { return pool_down_ || !queue_.empty(); });
          if (queue_.empty()) return;
          Task t = std::move(queue_.front());
          queue_.pop_front();
          lk.unlock();
          run_connection(t);
          lk.lock();
        }
      });
  Task t{std::move(fn), conns_.end(), false};
  std::string peer;
  int fd = port_ > 0 ? find_new_socket(&peer) : -1;
  int guard = fd >= 0 ? ::dup(fd) : -1;
  if (guard >= 0) {  // not found (not expected): served unguarded
    Conn c;
    c.guard_fd = guard;
    c.id = peer;
    c.client = peer.substr(0, peer.find('#'));
    c.since = Clock::now();
    c.deadline = c.since + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits_.request_seconds));
    conns_.push_back(c);
    t.conn = std::prev(conns_.end());
    t.guarded = true;
    enforce_caps(c.client);
  }
  queue_.push_back(std::move(t));
  l.unlock();
  cv_.notify_all();
}

void GuardedHttp::shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    pool_down_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void GuardedHttp::run_connection(Task& t) {
  if (!t.guarded) {
    t.fn();
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    t.conn->queued = false;  // its request's deadline starts now that a worker reads it
    t.conn->since = Clock::now();
    t.conn->deadline =
        t.conn->since + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits_.request_seconds));
  }
  t_current = {this, &*t.conn};
  t.fn();  // httplib: serves the connection's requests, then closes its fd
  t_current = {};
  std::lock_guard<std::mutex> l(mu_);
  ::close(t.conn->guard_fd);
  conns_.erase(t.conn);
}

void GuardedHttp::set_pending(Conn* c, bool pending, uint64_t body_bytes) {
  std::lock_guard<std::mutex> l(mu_);
  bool was = c->pending;
  c->pending = pending;
  c->reused = pending && (c->reused || !was);  // pending again after a response
  if (pending && !was) {  // a new request's reading begins
    c->since = Clock::now();
    c->deadline = c->since + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limits_.request_seconds));
  }
  if (pending && body_bytes)  // a declared body gets time at a modest rate on top
    c->deadline += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(body_bytes / (256.0 * 1024)));
}

void GuardedHttp::headers_read(uint64_t body_bytes) {
  if (t_current.server) t_current.server->set_pending((Conn*)t_current.conn, body_bytes > 0, body_bytes);
}

void GuardedHttp::request_read() {
  if (t_current.server) t_current.server->set_pending((Conn*)t_current.conn, false, 0);
}

bool GuardedHttp::client_gone() {
  if (!t_current.server || !t_current.conn) return false;
  pollfd p{((Conn*)t_current.conn)->guard_fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

void GuardedHttp::response_done() {
  if (t_current.server) t_current.server->set_pending((Conn*)t_current.conn, true, 0);
}

void GuardedHttp::watch() {
  std::unique_lock<std::mutex> l(mu_);
  while (!quit_) {
    watch_cv_.wait_for(l, std::chrono::milliseconds(200));
    auto now = Clock::now();
    for (Conn& c : conns_)
      if (c.pending && !c.cut && now > c.deadline && !request_waiting(c)) cut(c);
  }
}

}  // namespace kvad::serve
