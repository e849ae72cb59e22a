#include "serve/child.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <climits>
#include <cstring>

#include "core/error.h"

extern char** environ;

namespace kvad::serve {

std::string kvad_exe(const std::string& given) {
  if (!given.empty()) return given;
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, (size_t)n) : "";
}

namespace {

// posix_spawn with default signal dispositions and an empty mask (the server blocks SIGINT/SIGTERM
// in its threads and ignores SIGPIPE; a child must not inherit that). Returns the errno of a
// failed start (0 = started).
int spawn_with(const std::vector<std::string>& args, posix_spawn_file_actions_t* fa, pid_t* pid) {
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGCHLD);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = posix_spawn(pid, copy[0].c_str(), fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  return rc;
}

}  // namespace

Child spawn_child(const std::vector<std::string>& args) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) fail("pipe: {}", strerror(errno));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    fail("pipe: {}", strerror(errno));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  pid_t pid = -1;
  int rc = spawn_with(args, &fa, &pid);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  if (rc != 0) {
    close(out[0]);
    close(err[0]);
    fail("could not start {}: {}", args[0], strerror(rc));
  }
  return {pid, out[0], err[0]};
}

pid_t spawn_logged(const std::vector<std::string>& args, const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  int rc = spawn_with(args, &fa, &pid);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) fail("could not start {}: {}", args[0], strerror(rc));
  return pid;
}

int wait_child(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace kvad::serve
