// The web UI: embedded files served from memory at / (see web_assets.h).
#include <cstring>

#include "serve/server_impl.h"
#include "serve/web_assets.h"

namespace kvad::serve {

const WebAsset* find_web_asset(const std::string& name) {
  size_t n = 0;
  const WebAsset* a = web_assets(&n);
  for (size_t i = 0; i < n; i++)
    if (name == a[i].name) return &a[i];
  return nullptr;
}

static const char* mime_of(const std::string& name) {
  auto ends = [&](const char* ext) {
    size_t l = std::strlen(ext);
    return name.size() >= l && name.compare(name.size() - l, l, ext) == 0;
  };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".js")) return "text/javascript; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".ico")) return "image/x-icon";
  if (ends(".json")) return "application/json";
  return "application/octet-stream";
}

static void serve_asset(const std::string& name, httplib::Response& res) {
  const WebAsset* a = find_web_asset(name);
  if (!a) {
    res.status = 404;  // the error handler writes the JSON body
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  // The UI is never framed (clickjacking) and runs only its own scripts.
  res.set_header("X-Frame-Options", "DENY");
  res.set_header("Content-Security-Policy",
                 "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
                 "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
  res.set_header("Referrer-Policy", "no-referrer");
  res.set_content(reinterpret_cast<const char*>(a->begin), (size_t)(a->end - a->begin), mime_of(name));
}

void add_ui_routes(Server::Impl& s) {
  s.http.Get("/", [](const httplib::Request&, httplib::Response& res) { serve_asset("index.html", res); });
  s.http.Get(R"(/([A-Za-z0-9_.-]+))", [](const httplib::Request& req, httplib::Response& res) {
    serve_asset(req.matches[1], res);
  });
}

}  // namespace kvad::serve
