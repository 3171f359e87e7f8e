// HTTP/1.1 transport: one epoll event-loop thread owns every socket; the
// parsing is Node's http-parser (libhttp-parser, packaged in Debian). No
// thread is tied to a connection, so idle keep-alive connections, slow
// senders and long streams cost a file descriptor and a buffer, never a
// worker, and /health is answered from the loop itself.
//
// Limits the loop enforces per connection: a whole-header deadline from the
// request's first byte, a body deadline from the end of its headers, an idle
// keep-alive timeout, a cap on header and body bytes, a write-progress
// deadline and a cap on unsent output (a client that stops reading a stream).
// Pipelined requests are answered one at a time, in order.
//
// The application sees a request once it is complete and answers through a
// Reply, from any thread; if the client goes away first, the Reply's cancel
// callback runs (the server aborts the generation).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pagoda::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;   // "GET", "POST", ...
  std::string target;   // as sent, query included
  std::string path;     // target without the query
  HttpHeaders headers;  // names in lower case
  std::string body;
  // The value of a header (lower-case name); nullptr when absent.
  const std::string* header(std::string_view lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // extra headers
};

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                                   // 0: any free port
  size_t max_connections = 4096;                     // beyond: 503 and close
  size_t max_header_bytes = 64 << 10;                // request line + headers (431 beyond)
  size_t max_body_bytes = 8 << 20;                   // 413 beyond
  std::chrono::milliseconds header_timeout{10'000};  // first byte -> end of headers
  std::chrono::milliseconds body_timeout{30'000};    // end of headers -> end of body
  std::chrono::milliseconds idle_timeout{60'000};    // keep-alive with no request
  std::chrono::milliseconds write_timeout{30'000};   // pending output, no progress
  size_t max_unsent_bytes = 32 << 20;                // a stream whose client stops reading
  // The body of the transport's own errors (400, 408, 413, 431, 503).
  std::function<HttpResponse(int status, const std::string& message)> error_response;
};

class HttpTransport;
struct PostQueue;  // work handed to the loop thread

// The answer to one request. Copyable, usable from any thread; calls after
// the exchange ended or the connection closed do nothing.
class Reply {
 public:
  // The whole response; ends the exchange.
  void send(HttpResponse response) const;
  // A chunked response (server-sent events): headers now, then write()s,
  // then end(). The connection closes only after end()'s bytes are written.
  void start_stream(int status, std::string content_type, HttpHeaders headers = {}) const;
  void write(std::string chunk) const;
  void end() const;
  // `fn` runs once, on the transport thread, if the client goes away (or the
  // transport gives up on it) before the exchange ends. Set after the
  // connection closed, it runs at once.
  void on_cancel(std::function<void()> fn) const;

 private:
  friend class HttpTransport;
  Reply(std::shared_ptr<PostQueue> queue, uint64_t conn, uint64_t exchange)
      : queue_(std::move(queue)), conn_(conn), exchange_(exchange) {}
  // Shared so a Reply outliving the transport posts into a closed queue.
  std::shared_ptr<PostQueue> queue_;
  uint64_t conn_;
  uint64_t exchange_;
};

// Runs on the loop thread; must not block (hand slow work to other threads).
using HttpHandler = std::function<void(HttpRequest&& request, Reply reply)>;

class HttpTransport {
 public:
  HttpTransport(TransportOptions options, HttpHandler handler);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Binds and listens; returns the port. Throws InputError.
  int bind();
  // Runs the event loop until stop() has finished; returns when every
  // connection is closed.
  void run();
  // From any thread: stop accepting, close idle connections, let exchanges
  // in progress finish and flush for up to `flush_timeout` (then cancel and
  // close them), and end run().
  void stop(std::chrono::milliseconds flush_timeout);
  // Connections open now (for tests and metrics); any thread.
  size_t num_connections() const;

 private:
  friend class Reply;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagoda::server
