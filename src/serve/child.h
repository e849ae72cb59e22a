// Child processes -- this same binary (`kvad train`, `kvad pull`, `kvad cluster`'s replicas) or
// nginx: started with default signal dispositions (the server blocks SIGINT/SIGTERM in its threads
// and ignores SIGPIPE), stdin from /dev/null, stdout and stderr on pipes the caller reads or a log.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

namespace kvad::serve {

struct Child {
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1;
};

// The path of the running kvad binary ("" when it cannot be found); `given` overrides it.
std::string kvad_exe(const std::string& given = "");
// Starts args[0] with args; throws kvad::Error naming what failed.
Child spawn_child(const std::vector<std::string>& args);
// Starts args[0] with stdout and stderr appended to log_path (a long-running service).
pid_t spawn_logged(const std::vector<std::string>& args, const std::string& log_path);
// Reads both pipes line by line until they close (on_line(line, from_stdout)), then reaps the
// child; returns its exit status (128 + signal when killed).
template <typename F>
int drain_child(Child& c, F&& on_line);
int wait_child(pid_t pid);

}  // namespace kvad::serve

#include "serve/child_impl.h"
