// Child processes of this same binary (`kvad train`, `kvad pull`): started with default signal
// dispositions (the server blocks SIGINT/SIGTERM in its threads and ignores SIGPIPE), stdin from
// /dev/null, stdout and stderr on pipes the caller reads.
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
// Reads both pipes line by line until they close (on_line(line, from_stdout)), then reaps the
// child; returns its exit status (128 + signal when killed).
template <typename F>
int drain_child(Child& c, F&& on_line);
int wait_child(pid_t pid);

}  // namespace kvad::serve

#include "serve/child_impl.h"
