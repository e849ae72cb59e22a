// The nginx front end of `kvad cluster`: the configuration and the njs routing script it writes.
// Why nginx and njs (docs/scale-out.md): nginx's `hash KEY consistent` upstream does the consistent
// hashing (adding or removing a replica moves only its share of the ring), and a small njs function
// derives KEY from what every OpenAI client already sends -- the model, the system prompt and the
// first user turn of the JSON body -- so affinity needs nothing from clients. A client that knows
// better sends `X-Session-Id` and that is the key instead. Requests with no usable key (GETs, bodies
// that are not a conversation) go to the least-loaded replica (`least_conn`).
#pragma once
#include <string>
#include <vector>

namespace kvad::cli {

enum class ClusterRouting { Affinity, RoundRobin };

struct ClusterConfig {
  std::string listen_host = "127.0.0.1";
  int listen_port = 8080;
  std::vector<std::string> replicas;       // "host:port" of each kvad serve
  ClusterRouting routing = ClusterRouting::Affinity;
  std::string dir;                         // absolute: logs, pid file, temp folders, the njs script
  std::string js_module = "/usr/lib/nginx/modules/ngx_http_js_module.so";
  uint64_t max_body = 32ull << 20;         // as kvad serve's default --max-body
  int fail_timeout_s = 10;                 // a replica that refused a connection is skipped this long
};

// nginx.conf for `nginx -p DIR -c DIR/nginx.conf`.
std::string nginx_conf(const ClusterConfig& c);
// kvad-route.js: the njs module nginx.conf imports (the routing key and the affinity / least choice).
std::string route_js();
// Writes both into c.dir (atomically each); returns the path of nginx.conf.
std::string write_cluster_config(const ClusterConfig& c);

}  // namespace kvad::cli
