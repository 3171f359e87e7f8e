// The OpenAI-compatible HTTP server: routes, request validation, SSE
// streaming, auth, limits and metrics, on top of an AsyncEngine. It never
// touches KV blocks; it submits, streams and aborts requests.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "engine/async_engine.h"
#include "server/metrics.h"

namespace httplib {
class Server;
}

namespace pagoda::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  std::string served_model_name;
  std::string api_key;  // empty: no auth
  size_t max_body_bytes = 8 << 20;
  size_t max_pending_requests = 256;  // beyond this new requests get 503
  int http_threads = 64;              // concurrent connections served
};

class OpenAIServer {
 public:
  OpenAIServer(AsyncEngine& engine, ServerOptions options);
  ~OpenAIServer();

  // Binds the socket; returns the port (useful with port 0). Throws
  // InputError when the address cannot be bound.
  int bind();
  // Serves until stop(); returns when every connection handler has ended.
  void serve();
  // New requests get 503 from now on (graceful shutdown).
  void start_draining() { draining_ = true; }
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  AsyncEngine& engine_;
  ServerOptions options_;
  std::atomic<bool> draining_{false};
};

}  // namespace pagoda::server
