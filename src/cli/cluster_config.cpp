#include "cli/cluster_config.h"

#include <fmt/format.h>

#include "core/fs.h"

namespace kvad::cli {

namespace {

std::string servers(const ClusterConfig& c) {
  std::string s;
  for (const std::string& r : c.replicas)
    s += fmt::format("    server {} max_fails=1 fail_timeout={}s;\n", r, c.fail_timeout_s);
  return s;
}

// X-Kvad-Replica: the number of the replica that answered (1-based, as `kvad cluster` prints
// them), not its address. $upstream_addr lists every replica tried ("a:1, b:2"): the last answered.
std::string replica_map(const ClusterConfig& c) {
  std::string s = "  map $upstream_addr $kvad_replica {\n    default \"\";\n";
  for (size_t i = 0; i < c.replicas.size(); i++) {
    std::string re;
    for (char ch : c.replicas[i]) re += (ch == '.' || ch == '[' || ch == ']') ? std::string("\\") + ch : std::string(1, ch);
    s += fmt::format("    \"~(^|, ){}$\" {};\n", re, i + 1);
  }
  return s + "  }\n";
}

}  // namespace

std::string nginx_conf(const ClusterConfig& c) {
  const bool affinity = c.routing == ClusterRouting::Affinity;
  std::string upstreams;
  if (affinity) {
    // One ring for keyed requests, least_conn for the rest. `zone`: the workers share which
    // replicas failed, so one refused connection takes a dead replica out for every worker.
    upstreams = fmt::format("  upstream kvad_affinity {{\n    zone kvad_affinity 64k;\n    hash $kvad_key consistent;\n{}"
                            "    keepalive 32;\n  }}\n", servers(c));
    upstreams += fmt::format("  upstream kvad_least {{\n    zone kvad_least 64k;\n    least_conn;\n{}    keepalive 32;\n  }}\n",
                             servers(c));
  } else {
    upstreams = fmt::format("  upstream kvad_rr {{\n    zone kvad_rr 64k;\n{}    keepalive 32;\n  }}\n", servers(c));
  }
  std::string locations = affinity ? "    location / { js_content kvad.route; }\n"
                                     "    location @affinity { proxy_pass http://kvad_affinity; }\n"
                                     "    location @least { proxy_pass http://kvad_least; }\n"
                                   : "    location / { proxy_pass http://kvad_rr; }\n";
  std::string js = affinity ? fmt::format("  js_import kvad from {}/kvad-route.js;\n  js_set $kvad_key kvad.key;\n", c.dir) : "";
  std::string host = c.listen_host.find(':') != std::string::npos ? "[" + c.listen_host + "]" : c.listen_host;
  return fmt::format(
      R"(# Written by `kvad cluster` ({routing} routing over {n} kvad serve replicas). docs/scale-out.md
# explains each choice. Start: nginx -p {dir} -c {dir}/nginx.conf -e {dir}/nginx-error.log
{load}worker_processes auto;
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  log_format kvad '$remote_addr [$time_local] "$request" $status $body_bytes_sent $request_time '
                  'replica=$kvad_replica upstream="$upstream_addr"';
  access_log {dir}/nginx-access.log kvad;
  client_body_temp_path {dir}/tmp/body;
  proxy_temp_path {dir}/tmp/proxy;
  fastcgi_temp_path {dir}/tmp/fastcgi;
  uwsgi_temp_path {dir}/tmp/uwsgi;
  scgi_temp_path {dir}/tmp/scgi;
{js}
  # The routing key is read from the body, so the body is read whole before a replica is chosen
  # and must fit in memory: bodies over {buf} bytes still pass (up to the replicas' --max-body),
  # routed as keyless.
  client_max_body_size {max_body};
  client_body_buffer_size {buf};
  client_header_timeout 10s;
  client_body_timeout 10s;

{map}
{upstreams}
  server {{
    listen {host}:{port};
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_set_header Host $http_host;
    proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
    # Tokens reach the client as the replica writes them (server-sent events).
    proxy_buffering off;
    proxy_read_timeout 3600s;
    proxy_send_timeout 600s;
    proxy_connect_timeout 2s;
    # Only a replica that could not be reached is retried on the next one: once a replica has
    # answered anything, a failure is the client's to see (a stream cut by a dying replica fails).
    # non_idempotent: a POST sent on a kept-alive connection to a replica that has just died is
    # reset before any answer; without it nginx returned that client a 502 (no side effect to
    # repeat: the dead replica did nothing for it).
    proxy_next_upstream error timeout non_idempotent;
    add_header X-Kvad-Replica $kvad_replica always;
{locations}  }}
}}
)",
      fmt::arg("routing", affinity ? "prefix-affinity" : "round-robin"), fmt::arg("n", c.replicas.size()),
      fmt::arg("dir", c.dir), fmt::arg("load", affinity ? fmt::format("load_module {};\n", c.js_module) : ""),
      fmt::arg("js", js), fmt::arg("max_body", c.max_body), fmt::arg("buf", std::min<uint64_t>(c.max_body, 4u << 20)),
      fmt::arg("map", replica_map(c)), fmt::arg("upstreams", upstreams), fmt::arg("host", host),
      fmt::arg("port", c.listen_port), fmt::arg("locations", locations));
}

std::string route_js() {
  // njs (nginx's JavaScript, 0.7 in Debian 12): no for-of, no spread; JSON.parse refuses what it
  // cannot take (deep nesting included) by throwing, which makes the request keyless.
  return R"JS(// Written by `kvad cluster`: the routing key of a request (docs/scale-out.md).
// The key is what stays the same across one conversation's requests and differs between
// conversations: the model, the system prompt(s) and the first user turn (chat and Ollama's
// /api/chat), or the first 256 characters of a completion prompt of at least 64. A client's
// X-Session-Id header overrides it. No key: least-loaded replica.
const crypto = require('crypto');

function text(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let s = '';
  for (let i = 0; i < content.length; i++)
    if (content[i] && typeof content[i].text === 'string') s += content[i].text;
  return s;
}

function conversationKey(r) {
  const session = r.headersIn['X-Session-Id'];
  if (session) return 'session\u0000' + session;
  if (r.method !== 'POST') return '';
  let body;
  try {
    body = JSON.parse(r.requestText);
  } catch (e) {
    return '';  // not JSON, too deep, or a body too large to hold in memory
  }
  if (!body || typeof body !== 'object') return '';
  const model = typeof body.model === 'string' ? body.model : '';
  if (Array.isArray(body.messages)) {
    let k = 'chat\u0000' + model + '\u0000';
    for (let i = 0; i < body.messages.length; i++) {
      const m = body.messages[i];
      if (!m || typeof m !== 'object') continue;
      k += m.role + '\u0000' + text(m.content) + '\u0000';
      if (m.role === 'user') return k;
    }
    return '';
  }
  if (typeof body.prompt === 'string' && body.prompt.length >= 64)
    return 'prompt\u0000' + model + '\u0000' + body.prompt.slice(0, 256);
  return '';
}

function key(r) {
  const k = conversationKey(r);
  return k ? crypto.createHash('sha1').update(k).digest('hex') : '';
}

function route(r) {
  r.internalRedirect(key(r) ? '@affinity' : '@least');
}

export default {key, route};
)JS";
}

std::string write_cluster_config(const ClusterConfig& c) {
  std::string conf = c.dir + "/nginx.conf";
  if (c.routing == ClusterRouting::Affinity) atomic_write_file(c.dir + "/kvad-route.js", route_js());
  atomic_write_file(conf, nginx_conf(c));
  return conf;
}

}  // namespace kvad::cli
