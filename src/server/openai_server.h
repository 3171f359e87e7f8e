// The OpenAI-compatible HTTP server: routes, request validation, SSE
// streaming, auth, limits and metrics, on top of an AsyncEngine. It never
// touches KV blocks; it submits, streams and aborts requests.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "engine/async_engine.h"
#include "server/http_transport.h"
#include "server/metrics.h"

namespace pagoda::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  std::string served_model_name;
  std::string api_key;  // empty: no auth
  size_t max_body_bytes = 8 << 20;
  // Sequences (prompts x n) in flight; a request that would go past gets 503.
  size_t max_pending_requests = 256;
  int http_threads = 16;          // threads parsing requests and building responses
  size_t max_connections = 4096;  // open at once (503 beyond)
  std::chrono::milliseconds header_timeout{10'000};      // first byte -> end of headers
  std::chrono::milliseconds body_timeout{30'000};        // end of headers -> end of body
  std::chrono::milliseconds keep_alive_timeout{60'000};  // idle connection closes
  // vLLM's --reasoning-parser (server/reasoning_parser.h); "" = off.
  std::string reasoning_parser;
  // vLLM's --enable-auto-tool-choice with --tool-call-parser
  // (server/tool_call_parser.h): tool calls in chat output are parsed when
  // a request gives tools; "" = off.
  std::string tool_call_parser;
};

class OpenAIServer {
 public:
  OpenAIServer(AsyncEngine& engine, ServerOptions options);
  ~OpenAIServer();

  // Binds the socket; returns the port (useful with port 0). Throws
  // InputError when the address cannot be bound.
  int bind();
  // Serves until stop(); returns when every connection is closed.
  void serve();
  // New generation requests get 503 from now on (graceful shutdown).
  void start_draining() { draining_ = true; }
  // Stops accepting connections; responses in progress are written to their
  // last byte (streams end with [DONE]) for up to `flush_timeout`, then
  // serve() returns. Call after the engine has finished or aborted every
  // request, so each response has its end.
  void stop(std::chrono::milliseconds flush_timeout = std::chrono::seconds(10));

 private:
  struct Impl;
  // Checks auth, then hands the request to the worker pool.
  void route(HttpRequest&& req, Reply reply);
  void generate(bool chat, const HttpRequest& req, const Reply& reply);
  std::unique_ptr<Impl> impl_;
  AsyncEngine& engine_;
  ServerOptions options_;
  std::atomic<bool> draining_{false};
};

}  // namespace pagoda::server
