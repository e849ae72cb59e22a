// kvad cluster: N `kvad serve` replicas behind nginx on this machine, with prefix-affinity routing
// (cli/cluster_config.h says how a request finds its replica; docs/scale-out.md runs the same
// layout over several machines). For trying the layout out and for tests: it starts the replicas,
// waits until each answers /health, starts nginx in front, and stays in the foreground watching
// them. A replica that dies is reported and left down: nginx moves its conversations to the others.
// SIGINT / SIGTERM stop everything. `--write-config` only writes nginx.conf (+ the njs script) for
// replicas given with --upstream, for a real deployment.
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <httplib.h>

#include "cli/cluster_config.h"
#include "cli/common.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/store.h"
#include "serve/child.h"

namespace kvad::cli {

namespace {

struct ClusterArgs {
  int replicas = 3, port = 8080, first_port = 0, threads = 0;
  std::string host = "127.0.0.1", dir, routing = "affinity", nginx, model, max_body = "32MiB";
  std::vector<std::string> upstreams, serve_args;
  bool write_only = false;
  double start_timeout = 300;
};

struct Process {
  std::string name, log;
  int port = 0;
  pid_t pid = -1;
  bool alive = false;
};

std::string find_nginx(const std::string& given) {
  if (!given.empty()) return given;
  std::string path = getenv("PATH") ? getenv("PATH") : "";
  path += ":/usr/sbin:/usr/local/sbin";
  for (size_t b = 0; b <= path.size();) {
    size_t e = path.find(':', b);
    if (e == std::string::npos) e = path.size();
    std::string p = path.substr(b, e - b) + "/nginx";
    if (e > b && access(p.c_str(), X_OK) == 0) return p;
    b = e + 1;
  }
  fail("nginx is not installed: `apt-get install nginx libnginx-mod-http-js` (Debian's), or name it with --nginx PATH");
}

// A stop signal pending? SIGINT/SIGTERM are blocked in this process and read here.
bool stop_requested(const sigset_t& stops) {
  timespec zero{0, 0};
  return sigtimedwait(&stops, nullptr, &zero) > 0;
}

// Reaps whatever exited; reports each, once.
void reap(std::vector<Process>& procs) {
  for (Process& p : procs) {
    if (!p.alive) continue;
    int status = 0;
    if (waitpid(p.pid, &status, WNOHANG) != p.pid) continue;
    p.alive = false;
    std::string how = WIFEXITED(status) ? fmt::format("exited with status {}", WEXITSTATUS(status))
                                        : fmt::format("was killed by signal {}", WTERMSIG(status));
    std::fprintf(stderr, "kvad cluster: %s %s (its log: %s)\n", p.name.c_str(), how.c_str(), p.log.c_str());
  }
}

bool healthy(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1);
  c.set_read_timeout(5);
  auto res = c.Get("/health");
  return res && res->status == 200;
}

void stop_all(std::vector<Process>& procs, double grace_s) {
  for (Process& p : procs)
    if (p.alive) kill(p.pid, p.name == "nginx" ? SIGQUIT : SIGTERM);  // nginx: SIGQUIT is its graceful stop
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
  for (;;) {
    bool any = false;
    for (Process& p : procs)
      if (p.alive) {
        int status = 0;
        if (waitpid(p.pid, &status, WNOHANG) == p.pid) p.alive = false;
        else any = true;
      }
    if (!any) return;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (Process& p : procs)
    if (p.alive) kill(p.pid, SIGKILL), waitpid(p.pid, nullptr, 0), p.alive = false;
}

void write_state(const std::string& dir, const std::string& url, const std::vector<Process>& procs) {
  Json reps = Json::array();
  Json nginx = nullptr;
  for (const Process& p : procs) {
    Json j = {{"name", p.name}, {"pid", p.pid}, {"log", p.log}};
    if (p.name == "nginx") nginx = j;
    else j["port"] = p.port, reps.push_back(j);
  }
  atomic_write_file(dir + "/cluster.json", Json{{"url", url}, {"nginx", nginx}, {"replicas", reps}}.dump(2) + "\n");
}

ClusterConfig config_from(const ClusterArgs& a, const std::string& dir) {
  ClusterConfig c;
  c.listen_host = a.host;
  c.listen_port = a.port;
  c.routing = a.routing == "round-robin" ? ClusterRouting::RoundRobin : ClusterRouting::Affinity;
  c.dir = dir;
  c.max_body = parse_byte_size(a.max_body, "--max-body");
  if (!a.upstreams.empty()) c.replicas = a.upstreams;
  else
    for (int i = 0; i < a.replicas; i++) c.replicas.push_back(fmt::format("127.0.0.1:{}", a.first_port + i));
  if (c.routing == ClusterRouting::Affinity && !file_exists(c.js_module))
    fail("nginx's JavaScript module is not installed ({}): `apt-get install libnginx-mod-http-js`, or use "
         "--routing round-robin (no prefix affinity)", c.js_module);
  return c;
}

bool given(const std::vector<std::string>& args, const std::string& flag, const std::string& short_flag = "") {
  for (const std::string& x : args)
    if (x == flag || x.rfind(flag + "=", 0) == 0 || (!short_flag.empty() && x == short_flag)) return true;
  return false;
}

int run_cluster(const ClusterArgs& a, std::vector<Process>& procs) {
  std::string dir = a.dir.empty() ? join_path(kvad_home(), "cluster") : a.dir;
  make_directories(dir);
  make_directories(dir + "/tmp");
  dir = std::filesystem::canonical(dir).string();
  ClusterArgs args = a;
  if (args.first_port == 0) args.first_port = args.port + 1;
  ClusterConfig conf = config_from(args, dir);
  if (args.write_only) {
    std::string path = write_cluster_config(conf);
    std::printf("wrote %s%s\nstart it: %s -p %s -c %s -e %s/nginx-error.log\n", path.c_str(),
                conf.routing == ClusterRouting::Affinity ? (" and " + dir + "/kvad-route.js").c_str() : "",
                find_nginx(args.nginx).c_str(), dir.c_str(), path.c_str(), dir.c_str());
    return 0;
  }
  if (!args.upstreams.empty()) fail("--upstream is for --write-config (replicas on other machines); without it kvad "
                                    "cluster starts its own --replicas on this machine");
  std::string nginx_bin = find_nginx(args.nginx);
  std::string conf_path = write_cluster_config(conf);

  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stops, nullptr);

  int threads = args.threads > 0 ? args.threads : std::max(1, (int)std::thread::hardware_concurrency() / args.replicas);
  std::string exe = serve::kvad_exe();
  for (int i = 0; i < args.replicas; i++) {
    Process p{fmt::format("replica {} (port {})", i + 1, args.first_port + i), fmt::format("{}/replica-{}.log", dir, i + 1),
              args.first_port + i};
    // nginx reaches the replicas from 127.0.0.1; the client it names in X-Forwarded-For keeps
    // each client's cached prefixes its own, as without the front end.
    std::vector<std::string> cmd = {exe, "serve", "--host", "127.0.0.1", "--port", std::to_string(p.port), "--trusted-proxy", "127.0.0.1"};
    if (!given(args.serve_args, "--threads", "-t")) cmd.insert(cmd.end(), {"--threads", std::to_string(threads)});
    if (!given(args.serve_args, "--max-body")) cmd.insert(cmd.end(), {"--max-body", std::to_string(conf.max_body)});
    if (!args.model.empty()) cmd.insert(cmd.end(), {"--model", args.model});
    cmd.insert(cmd.end(), args.serve_args.begin(), args.serve_args.end());
    truncate(p.log.c_str(), 0);
    p.pid = serve::spawn_logged(cmd, p.log);
    p.alive = true;
    procs.push_back(p);
  }
  std::fprintf(stderr, "kvad cluster: starting %d replicas (%d thread%s each; logs in %s)\n", args.replicas, threads, threads == 1 ? "" : "s", dir.c_str());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(args.start_timeout);
  for (Process& p : procs) {
    while (!healthy(p.port)) {
      reap(procs);
      const bool late = std::chrono::steady_clock::now() > deadline;
      if (!p.alive || late) {
        stop_all(procs, 5);
        fail("{} {}: see {}", p.name, p.alive ? "did not answer /health in time" : "stopped before it answered", p.log);
      }
      if (stop_requested(stops)) {
        stop_all(procs, 5);
        return 130;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  Process ngx{"nginx", dir + "/nginx-error.log", args.port};
  ngx.pid = serve::spawn_logged({nginx_bin, "-p", dir, "-c", conf_path, "-e", ngx.log, "-g", "daemon off;"}, ngx.log);
  ngx.alive = true;
  procs.push_back(ngx);
  std::string url = fmt::format("http://{}:{}", args.host.find(':') != std::string::npos ? "[" + args.host + "]" : args.host, args.port);
  for (;;) {  // nginx is up when it answers through to a replica
    reap(procs);
    if (!procs.back().alive || stop_requested(stops)) {
      bool died = !procs.back().alive;
      stop_all(procs, 5);
      if (died) fail("nginx stopped at start (port {} taken?): see {}", args.port, ngx.log);
      return 130;
    }
    httplib::Client c(args.host, args.port);
    c.set_connection_timeout(1);
    if (auto res = c.Get("/health"); res && res->status == 200) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  write_state(dir, url, procs);
  std::printf("kvad cluster: %d replicas behind nginx at %s (%s routing); state in %s/cluster.json\n", args.replicas,
              url.c_str(), args.routing.c_str(), dir.c_str());
  std::fflush(stdout);
  for (;;) {
    timespec tick{0, 200'000'000};
    if (sigtimedwait(&stops, nullptr, &tick) > 0) break;
    reap(procs);
    if (!procs.back().alive) {
      stop_all(procs, 5);
      fail("nginx stopped: see {}", ngx.log);
    }
    bool any = false;
    for (size_t i = 0; i + 1 < procs.size(); i++) any |= procs[i].alive;
    if (!any) {
      stop_all(procs, 5);
      fail("every replica has stopped: see {}/replica-*.log", dir);
    }
  }
  std::fprintf(stderr, "kvad cluster: stopping\n");
  stop_all(procs, 10);
  return 0;
}

}  // namespace

void add_cluster(CLI::App& app) {
  auto* cmd = app.add_subcommand("cluster", "several `kvad serve` replicas behind nginx with prefix-affinity routing "
                                 "(one machine; --write-config for several)");
  auto a = std::make_shared<ClusterArgs>();
  cmd->add_option("-n,--replicas", a->replicas, "replicas to start on this machine (default 3)")->check(CLI::Range(1, 64));
  cmd->add_option("-m,--model", a->model, "the model every replica serves (default: the default model, as `kvad serve`)");
  cmd->add_option("--host", a->host, "address nginx listens on (default 127.0.0.1; replicas always listen on loopback)");
  cmd->add_option("--port", a->port, "nginx's port (default 8080)")->check(CLI::Range(1, 65535));
  cmd->add_option("--first-port", a->first_port, "the first replica's port; the others follow (default --port + 1)")
      ->check(CLI::Range(1, 65535));
  cmd->add_option("--routing", a->routing, "affinity (a conversation stays on the replica holding its KV blocks; default) "
                  "or round-robin (for comparison)")
      ->check(CLI::IsMember({"affinity", "round-robin"}));
  cmd->add_option("-t,--threads", a->threads, "threads per replica (default: cores / replicas)")->check(CLI::Range(0, 1024));
  cmd->add_option("--dir", a->dir, "where nginx.conf, logs and cluster.json go (default $KVAD_HOME/cluster)");
  cmd->add_option("--nginx", a->nginx, "the nginx binary (default: nginx on PATH or /usr/sbin/nginx)");
  cmd->add_option("--max-body", a->max_body, "largest request body (default 32MiB; given to nginx and every replica)");
  cmd->add_option("--start-timeout", a->start_timeout, "seconds the replicas get to load and answer (default 300)")
      ->check(CLI::Range(1.0, 86400.0));
  cmd->add_flag("--write-config", a->write_only, "only write nginx.conf and kvad-route.js into --dir and exit");
  cmd->add_option("--upstream", a->upstreams, "HOST:PORT of a replica on another machine (repeatable; with --write-config)");
  cmd->add_option("serve_args", a->serve_args, "after --: options for every replica's `kvad serve` (e.g. -- --parallel 8 --api-key-file K)");
  cmd->callback([a] {
    if (a->first_port == 0 && a->port + a->replicas > 65535) fail("--port {} leaves no room for {} replica ports", a->port, a->replicas);
    std::vector<Process> procs;
    int rc = 0;
    try {
      rc = run_cluster(*a, procs);
    } catch (...) {
      stop_all(procs, 5);  // never leave replicas or nginx behind
      throw;
    }
    std::exit(rc);
  });
}

}  // namespace kvad::cli
