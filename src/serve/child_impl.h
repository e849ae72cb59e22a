// drain_child's template body (included by child.h).
#pragma once
#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace kvad::serve {

template <typename F>
int drain_child(Child& c, F&& on_line) {
  std::string buf[2];
  pollfd fds[2] = {{c.out_fd, POLLIN, 0}, {c.err_fd, POLLIN, 0}};
  int open_fds = 2;
  char chunk[4096];
  while (open_fds > 0) {
    if (poll(fds, 2, 1000) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, chunk, sizeof chunk);
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        open_fds--;
        continue;
      }
      buf[i].append(chunk, (size_t)n);
      size_t pos;
      while ((pos = buf[i].find_first_of("\r\n")) != std::string::npos) {
        std::string line = buf[i].substr(0, pos);
        buf[i].erase(0, pos + 1);
        on_line(line, i == 0);
      }
    }
  }
  for (int i = 0; i < 2; i++)
    if (!buf[i].empty()) on_line(buf[i], i == 0);
  c.out_fd = c.err_fd = -1;
  return wait_child(c.pid);
}

}  // namespace kvad::serve
