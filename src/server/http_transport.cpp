#include "server/http_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <http_parser.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>

#include "core/error.h"

namespace pagoda::server {

namespace {

using Clock = std::chrono::steady_clock;

// How often deadlines are checked: a timeout fires at most this late.
constexpr auto kTick = std::chrono::milliseconds(100);
// Bytes read but not yet parsed while a request is being answered (pipelined
// requests wait here); beyond it the loop stops reading that socket.
constexpr size_t kMaxBufferedInput = 1 << 20;
// After an error answered with "Connection: close", how long the remaining
// input is drained so the client reads the answer instead of a reset.
constexpr auto kLingerTime = std::chrono::seconds(2);

const char* reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 415:
      return "Unsupported Media Type";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Server Error";
  }
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

struct PostQueue {
  std::mutex mu;
  std::vector<std::function<void()>> work;
  int wake_fd = -1;
  bool closed = false;   // the transport is gone: drop what comes
  void* impl = nullptr;  // HttpTransport::Impl, for the closures Reply builds

  void post(std::function<void()> fn) {
    std::lock_guard lock(mu);
    if (closed) return;
    const bool wake = work.empty();
    work.push_back(std::move(fn));
    if (wake) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(wake_fd, &one, sizeof one);
    }
  }
};

const std::string* HttpRequest::header(std::string_view lower_name) const {
  for (const auto& [k, v] : headers)
    if (k == lower_name) return &v;
  return nullptr;
}

struct HttpTransport::Impl {
  enum class Phase {
    Idle,      // waiting for the first byte of the next request
    Headers,   // request line and headers arriving
    Body,      // body arriving
    Handling,  // complete; the application is answering
    Closing,   // error sent: flush, drain input, close
  };

  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    Impl* impl = nullptr;
    http_parser parser{};
    Phase phase = Phase::Idle;
    Clock::time_point deadline;  // of the current phase (Idle/Headers/Body/Closing)
    std::string in;              // read, not yet parsed
    std::string out;             // to write
    size_t out_off = 0;
    Clock::time_point last_write_progress;
    bool reading = true;      // EPOLLIN wanted
    bool peer_eof = false;    // the client closed its sending side
    bool want_write = false;  // EPOLLOUT registered
    // The request being parsed.
    HttpRequest req;
    std::string field, value;
    bool in_value = false;
    size_t header_bytes = 0;
    bool keep_alive = true;
    bool message_done = false;
    int parse_error_status = 0;  // set by a callback that rejects the request
    std::string parse_error;
    // The exchange being answered.
    uint64_t exchange = 0;
    bool streaming = false;
    bool close_after_write = false;
    std::function<void()> on_cancel;
  };

  TransportOptions opt;
  HttpHandler handler;
  http_parser_settings settings{};
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;
  bool accepting = true;
  Clock::time_point accept_resume;  // after EMFILE
  std::unordered_map<uint64_t, std::unique_ptr<Conn>> conns;
  uint64_t next_conn = 1;
  std::vector<uint64_t> to_parse;  // connections whose buffered input may hold a request
  std::atomic<size_t> open_count{0};

  // Work posted from other threads.
  std::shared_ptr<PostQueue> queue = std::make_shared<PostQueue>();
  bool stopping = false;  // loop thread only
  Clock::time_point stop_deadline;

  void post(std::function<void()> fn) { queue->post(std::move(fn)); }

  Conn* find(uint64_t conn, uint64_t exchange) {
    const auto it = conns.find(conn);
    if (it == conns.end()) return nullptr;
    Conn* c = it->second.get();
    if (c->exchange != exchange || c->phase != Phase::Handling) return nullptr;
    return c;
  }

  // ---- epoll bookkeeping -------------------------------------------------

  void update_events(Conn& c) {
    epoll_event ev{};
    // After the client's EOF, EPOLLRDHUP would fire forever (level-triggered).
    ev.events = (c.peer_eof ? 0u : EPOLLRDHUP) | (c.reading ? EPOLLIN : 0u) |
                (c.want_write ? EPOLLOUT : 0u);
    ev.data.u64 = c.id;
    epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
  }

  void close_conn(Conn& c, bool cancel) {
    if (cancel && c.on_cancel) {
      auto fn = std::move(c.on_cancel);
      c.on_cancel = nullptr;
      fn();
    }
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
    ::close(c.fd);
    const uint64_t id = c.id;
    conns.erase(id);  // c is gone from here on
    open_count.store(conns.size());
  }

  // Writes what it can; closes the connection when done and asked to, or on
  // a write error (cancelling the exchange). Returns false if it closed.
  bool flush(Conn& c) {
    while (c.out_off < c.out.size()) {
      const ssize_t n =
          ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        c.last_write_progress = Clock::now();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      close_conn(c, true);  // the peer is gone
      return false;
    }
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
      if (c.close_after_write && c.phase != Phase::Handling) {
        if (c.phase == Phase::Closing) {
          // Half-close so the client sees the end of our answer, then drain
          // its input for a moment: closing with unread input would reset
          // the connection and could discard the answer at the client.
          ::shutdown(c.fd, SHUT_WR);
          c.close_after_write = false;
          c.deadline = Clock::now() + kLingerTime;
          c.reading = true;
          update_events(c);
        } else {
          close_conn(c, false);
          return false;
        }
      }
    } else if (c.out_off > (1 << 20)) {  // keep the buffer from growing at the front
      c.out.erase(0, c.out_off);
      c.out_off = 0;
    }
    const bool want = c.out_off < c.out.size();
    if (want != c.want_write) {
      // The write deadline counts from when the socket stopped taking
      // bytes, not from the last write (a stream may idle between tokens).
      if (want) c.last_write_progress = Clock::now();
      c.want_write = want;
      update_events(c);
    }
    return true;
  }

  // ---- responses -----------------------------------------------------------

  void append_head(Conn& c, int status, const std::string& content_type, const HttpHeaders& headers,
                   const std::string* body) {
    std::string& o = c.out;
    o += "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
    if (!content_type.empty()) o += "Content-Type: " + content_type + "\r\n";
    for (const auto& [k, v] : headers) o += k + ": " + v + "\r\n";
    if (body) {
      o += "Content-Length: " + std::to_string(body->size()) + "\r\n";
    } else {
      o += "Transfer-Encoding: chunked\r\n";
    }
    o += c.keep_alive && !stopping ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
    o += "\r\n";
    if (body) o += *body;
  }

  // The exchange's last byte is queued: the next pipelined request may start.
  void finish_exchange(Conn& c) {
    c.on_cancel = nullptr;
    c.streaming = false;
    ++c.exchange;
    if (!c.keep_alive || stopping) {
      c.phase = Phase::Idle;
      c.close_after_write = true;
      c.reading = false;
      update_events(c);
    } else {
      c.phase = Phase::Idle;
      c.deadline = Clock::now() + opt.idle_timeout;
      http_parser_pause(&c.parser, 0);
      if (!c.reading) {
        c.reading = true;
        update_events(c);
      }
      // Parsed from the loop, not from here: a long pipeline answered
      // inline would otherwise recurse once per request.
      to_parse.push_back(c.id);
    }
    flush(c);
  }

  // An error the transport answers itself; the connection closes after it.
  void fail(Conn& c, int status, const std::string& message) {
    if (c.phase == Phase::Handling) return;  // the application answers this one
    const HttpResponse r = opt.error_response ? opt.error_response(status, message)
                                              : HttpResponse{status, "text/plain", message, {}};
    c.keep_alive = false;
    append_head(c, r.status, r.content_type, r.headers, &r.body);
    c.phase = Phase::Closing;
    c.close_after_write = true;
    c.in.clear();
    c.deadline = Clock::now() + kLingerTime;
    flush(c);
  }

  void send(uint64_t conn, uint64_t exchange, HttpResponse r) {
    Conn* c = find(conn, exchange);
    if (!c || c->streaming) return;
    append_head(*c, r.status, r.content_type, r.headers, &r.body);
    finish_exchange(*c);
  }

  void start_stream(uint64_t conn, uint64_t exchange, int status, const std::string& type,
                    const HttpHeaders& headers) {
    Conn* c = find(conn, exchange);
    if (!c || c->streaming) return;
    c->streaming = true;
    append_head(*c, status, type, headers, nullptr);
    flush(*c);
  }

  void write_chunk(uint64_t conn, uint64_t exchange, const std::string& data) {
    Conn* c = find(conn, exchange);
    if (!c || !c->streaming || data.empty()) return;
    char size[32];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    c->out += size;
    c->out += data;
    c->out += "\r\n";
    if (c->out.size() - c->out_off > opt.max_unsent_bytes) {
      std::fprintf(stderr, "pagoda: connection %llu stopped reading its stream; closing it\n",
                   static_cast<unsigned long long>(c->id));
      close_conn(*c, true);
      return;
    }
    flush(*c);
  }

  void end_stream(uint64_t conn, uint64_t exchange) {
    Conn* c = find(conn, exchange);
    if (!c || !c->streaming) return;
    c->out += "0\r\n\r\n";
    finish_exchange(*c);
  }

  void set_cancel(uint64_t conn, uint64_t exchange, std::function<void()> fn) {
    Conn* c = find(conn, exchange);
    if (!c) {
      fn();  // already gone (or already answered: then cancelling is a no-op)
      return;
    }
    c->on_cancel = std::move(fn);
    if (c->peer_eof) close_conn(*c, true);  // the client left while we prepared
  }

  // ---- parsing ---------------------------------------------------------------

  static Conn& conn_of(http_parser* p) { return *static_cast<Conn*>(p->data); }

  static int reject(Conn& c, int status, std::string message) {
    c.parse_error_status = status;
    c.parse_error = std::move(message);
    return 1;
  }

  static int count_header_bytes(Conn& c, size_t n) {
    c.header_bytes += n;
    if (c.header_bytes > c.impl->opt.max_header_bytes) {
      return reject(c, 431,
                    "the request line and headers exceed " +
                        std::to_string(c.impl->opt.max_header_bytes) + " bytes");
    }
    return 0;
  }

  static void end_header(Conn& c) {
    if (!c.in_value && c.field.empty()) return;
    std::string name;
    name.reserve(c.field.size());
    for (char ch : c.field) name += lower(ch);
    c.req.headers.emplace_back(std::move(name), std::move(c.value));
    c.field.clear();
    c.value.clear();
    c.in_value = false;
  }

  void init_settings() {
    settings.on_message_begin = [](http_parser* p) {
      Conn& c = conn_of(p);
      c.req = HttpRequest{};
      c.field.clear();
      c.value.clear();
      c.in_value = false;
      c.header_bytes = 0;
      c.message_done = false;
      c.phase = Phase::Headers;
      c.deadline = Clock::now() + c.impl->opt.header_timeout;
      return 0;
    };
    settings.on_url = [](http_parser* p, const char* at, size_t n) {
      Conn& c = conn_of(p);
      c.req.target.append(at, n);
      return count_header_bytes(c, n);
    };
    settings.on_header_field = [](http_parser* p, const char* at, size_t n) {
      Conn& c = conn_of(p);
      if (c.in_value) end_header(c);
      c.field.append(at, n);
      return count_header_bytes(c, n);
    };
    settings.on_header_value = [](http_parser* p, const char* at, size_t n) {
      Conn& c = conn_of(p);
      c.in_value = true;
      c.value.append(at, n);
      return count_header_bytes(c, n);
    };
    settings.on_headers_complete = [](http_parser* p) {
      Conn& c = conn_of(p);
      end_header(c);
      Impl& t = *c.impl;
      c.req.method = http_method_str(static_cast<http_method>(p->method));
      const size_t q = c.req.target.find('?');
      c.req.path = c.req.target.substr(0, q);
      c.keep_alive = http_should_keep_alive(p) != 0;
      const bool has_length = (p->flags & F_CONTENTLENGTH) != 0;
      if (has_length && p->content_length > t.opt.max_body_bytes) {
        reject(c, 413,
               "the request body is too large (" + std::to_string(p->content_length) +
                   " bytes; the limit is " + std::to_string(t.opt.max_body_bytes) + ")");
        return -1;  // http-parser: an error; keeps the parser from reading on
      }
      c.phase = Phase::Body;
      c.deadline = Clock::now() + t.opt.body_timeout;
      // curl and others wait for this before sending a larger body.
      if (const std::string* e = c.req.header("expect");
          e && (has_length || (p->flags & F_CHUNKED)) && p->http_minor >= 1) {
        std::string v;
        for (char ch : *e) v += lower(ch);
        if (v == "100-continue") c.out += "HTTP/1.1 100 Continue\r\n\r\n";
      }
      return 0;
    };
    settings.on_body = [](http_parser* p, const char* at, size_t n) {
      Conn& c = conn_of(p);
      if (c.req.body.size() + n > c.impl->opt.max_body_bytes) {
        return reject(c, 413,
                      "the request body is too large (the limit is " +
                          std::to_string(c.impl->opt.max_body_bytes) + " bytes)");
      }
      c.req.body.append(at, n);
      return 0;
    };
    settings.on_message_complete = [](http_parser* p) {
      Conn& c = conn_of(p);
      c.message_done = true;
      // One request at a time: the rest of the input waits for its answer.
      http_parser_pause(p, 1);
      return 0;
    };
  }

  void parse(Conn& c) {
    if (c.phase == Phase::Handling || c.phase == Phase::Closing) return;
    if (c.in.empty()) return;
    const size_t n = http_parser_execute(&c.parser, &settings, c.in.data(), c.in.size());
    c.in.erase(0, n);
    const auto err = static_cast<http_errno>(c.parser.http_errno);
    if (c.parse_error_status != 0) {
      fail(c, c.parse_error_status, c.parse_error);
      return;
    }
    if (err != HPE_OK && err != HPE_PAUSED) {
      fail(c, 400, std::string("malformed HTTP request: ") + http_errno_description(err));
      return;
    }
    if (c.parser.upgrade && !c.message_done) {
      fail(c, 400, "protocol upgrades are not supported");
      return;
    }
    if (!c.out.empty() && !flush(c)) return;  // 100 Continue
    if (!c.message_done) return;
    // A complete request: hand it to the application.
    c.message_done = false;
    c.phase = Phase::Handling;
    if (c.parser.upgrade) c.keep_alive = false;
    if (c.in.size() > kMaxBufferedInput && c.reading) {
      c.reading = false;
      update_events(c);
    }
    const Reply reply(queue, c.id, c.exchange);
    HttpRequest req = std::move(c.req);
    c.req = HttpRequest{};
    handler(std::move(req), reply);  // may answer inline (and even close c)
  }

  // ---- events ------------------------------------------------------------

  void on_readable(Conn& c) {
    char buf[64 << 10];
    bool eof = false, hard = false;
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) {
        if (c.phase == Phase::Closing) continue;  // draining after an error
        c.in.append(buf, static_cast<size_t>(n));
        if (c.in.size() > kMaxBufferedInput) {
          if (c.phase == Phase::Handling) {  // a pipeline waiting: stop reading
            c.reading = false;
            update_events(c);
            return;
          }
          break;
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      eof = true;
      hard = n < 0;
      break;
    }
    const uint64_t id = c.id;
    parse(c);  // a request followed by the client's half-close is still a request
    if (!eof) return;
    const auto it = conns.find(id);
    if (it != conns.end()) on_peer_closed(*it->second, hard);
  }

  // The client closed its side (hard: the connection broke).
  void on_peer_closed(Conn& c, bool hard) {
    switch (c.phase) {
      case Phase::Headers:
        close_conn(c, false);
        return;
      case Phase::Body:
        // Answered for a client that only half-closed; the connection closes
        // once the answer is out (or at once if the client is fully gone).
        if (!(c.parser.flags & F_CHUNKED)) {
          fail(c, 400,
               "the body ended before Content-Length bytes (" + std::to_string(c.req.body.size()) +
                   " received, " + std::to_string(c.req.body.size() + c.parser.content_length) +
                   " announced)");
        } else {
          fail(c, 400, "the request body ended before its last chunk");
        }
        return;
      case Phase::Handling:
        // The client went away before its answer. A generation (it has a
        // cancel callback) is aborted and the connection closed, as vLLM
        // does. Other answers (/health, /tokenize) are quick and still go
        // out, for a client that only closed its sending side.
        if (!hard && !c.peer_eof && !c.on_cancel) {
          c.peer_eof = true;
          c.keep_alive = false;
          c.reading = false;
          update_events(c);
          return;
        }
        close_conn(c, true);
        return;
      default:
        close_conn(c, true);
        return;
    }
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors: pause accepting instead of spinning on the
          // readable listen socket.
          set_accepting(false);
          accept_resume = Clock::now() + kTick * 5;
        }
        return;
      }
      if (conns.size() >= opt.max_connections || stopping) {
        const HttpResponse r =
            opt.error_response
                ? opt.error_response(503, stopping ? "the server is shutting down"
                                                   : "too many open connections; retry later")
                : HttpResponse{503, "text/plain", "busy", {}};
        std::string msg = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: " + r.content_type +
                          "\r\nContent-Length: " + std::to_string(r.body.size()) +
                          "\r\nConnection: close\r\n\r\n" + r.body;
        [[maybe_unused]] ssize_t n = ::send(fd, msg.data(), msg.size(), MSG_NOSIGNAL);
        ::close(fd);
        continue;
      }
      int yes = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      auto c = std::make_unique<Conn>();
      c->id = next_conn++;
      c->fd = fd;
      c->impl = this;
      http_parser_init(&c->parser, HTTP_REQUEST);
      c->parser.data = c.get();
      // A new connection gets the header deadline for its first byte too:
      // silent sockets should not linger as long as idle keep-alive ones.
      c->deadline = Clock::now() + opt.header_timeout;
      c->last_write_progress = Clock::now();
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = c->id;
      if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        ::close(fd);
        continue;
      }
      conns.emplace(c->id, std::move(c));
      open_count.store(conns.size());
    }
  }

  void set_accepting(bool on) {
    if (on == accepting || listen_fd < 0) return;
    accepting = on;
    if (on) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = 0;
      epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
    } else {
      epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
    }
  }

  // Deadlines, checked every tick.
  void check_deadlines() {
    const auto now = Clock::now();
    if (!accepting && !stopping && now >= accept_resume) set_accepting(true);
    std::vector<uint64_t> ids;
    ids.reserve(conns.size());
    for (const auto& [id, _] : conns) ids.push_back(id);
    for (uint64_t id : ids) {
      const auto it = conns.find(id);
      if (it == conns.end()) continue;
      Conn& c = *it->second;
      if (c.out_off < c.out.size() && now - c.last_write_progress > opt.write_timeout) {
        close_conn(c, true);  // the client stopped reading
        continue;
      }
      if (now < c.deadline) continue;
      switch (c.phase) {
        case Phase::Idle:
          if (c.out_off >= c.out.size()) close_conn(c, false);
          break;
        case Phase::Headers:
          fail(c, 408,
               "the request headers did not arrive within " +
                   std::to_string(opt.header_timeout.count()) + " ms");
          break;
        case Phase::Body:
          fail(c, 408,
               "the request body did not arrive within " +
                   std::to_string(opt.body_timeout.count()) + " ms (" +
                   std::to_string(c.req.body.size()) + " bytes received)");
          break;
        case Phase::Closing:
          close_conn(c, false);
          break;
        case Phase::Handling:
          break;
      }
    }
  }

  void begin_stop() {
    if (stopping) return;
    stopping = true;
    set_accepting(false);
    // Closed, not just unwatched: connections the kernel would otherwise
    // still accept into the backlog get "refused" at once.
    ::close(listen_fd);
    listen_fd = -1;
    std::vector<uint64_t> ids;
    for (const auto& [id, _] : conns) ids.push_back(id);
    for (uint64_t id : ids) {
      const auto it = conns.find(id);
      if (it == conns.end()) continue;
      Conn& c = *it->second;
      // Exchanges being answered finish (and then close); the rest close now.
      if (c.phase == Phase::Handling) continue;
      if (c.out_off < c.out.size()) {
        c.close_after_write = true;
        c.reading = false;
        update_events(c);
        continue;
      }
      close_conn(c, false);
    }
  }

  void run() {
    epoll_event events[256];
    auto next_tick = Clock::now() + kTick;
    for (;;) {
      if (stopping && (conns.empty() || Clock::now() >= stop_deadline)) break;
      const int n = epoll_wait(epoll_fd, events, 256, static_cast<int>(kTick.count()));
      for (int i = 0; i < n; ++i) {
        const uint64_t key = events[i].data.u64;
        const uint32_t ev = events[i].events;
        if (key == 0) {
          accept_all();
          continue;
        }
        if (key == UINT64_MAX) {
          uint64_t count;
          [[maybe_unused]] ssize_t r = ::read(wake_fd, &count, sizeof count);
          std::vector<std::function<void()>> work;
          {
            std::lock_guard lock(queue->mu);
            work.swap(queue->work);
          }
          for (auto& fn : work) fn();
          continue;
        }
        auto it = conns.find(key);
        if (it == conns.end()) continue;
        Conn& c = *it->second;
        if (ev & EPOLLOUT) {
          if (!flush(c)) continue;
        }
        if (ev & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
          on_readable(c);
        } else if (ev & EPOLLRDHUP) {
          // Peer closed while we are not reading (a full pipeline buffer).
          on_peer_closed(c, false);
        }
      }
      // Requests that were waiting behind an answered one.
      while (!to_parse.empty()) {
        std::vector<uint64_t> ids;
        ids.swap(to_parse);
        for (uint64_t id : ids) {
          const auto it = conns.find(id);
          if (it != conns.end()) parse(*it->second);
        }
      }
      if (Clock::now() >= next_tick) {
        check_deadlines();
        next_tick = Clock::now() + kTick;
      }
    }
    // Past the flush deadline: cancel what is left.
    std::vector<uint64_t> ids;
    for (const auto& [id, _] : conns) ids.push_back(id);
    for (uint64_t id : ids) {
      const auto it = conns.find(id);
      if (it != conns.end()) close_conn(*it->second, true);
    }
  }
};

HttpTransport::HttpTransport(TransportOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>()) {
  impl_->opt = std::move(options);
  impl_->handler = std::move(handler);
  impl_->init_settings();
  impl_->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  impl_->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl_->epoll_fd < 0 || impl_->wake_fd < 0)
    throw_input_error("epoll/eventfd: {}", std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = UINT64_MAX;
  epoll_ctl(impl_->epoll_fd, EPOLL_CTL_ADD, impl_->wake_fd, &ev);
  impl_->queue->wake_fd = impl_->wake_fd;
  impl_->queue->impl = impl_.get();
}

HttpTransport::~HttpTransport() {
  std::vector<std::function<void()>> dropped;  // destroyed outside the lock
  {
    std::lock_guard lock(impl_->queue->mu);
    impl_->queue->closed = true;
    dropped.swap(impl_->queue->work);
  }
  for (auto& [id, c] : impl_->conns) ::close(c->fd);
  if (impl_->listen_fd >= 0) ::close(impl_->listen_fd);  // stop() closed it already
  ::close(impl_->wake_fd);
  ::close(impl_->epoll_fd);
}

int HttpTransport::bind() {
  Impl& t = *impl_;
  // Each connection is a descriptor: make the soft limit the hard one.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(t.opt.port);
  if (getaddrinfo(t.opt.host.c_str(), port.c_str(), &hints, &res) != 0 || !res) {
    throw_input_error("cannot resolve host '{}'", t.opt.host);
  }
  int fd = -1;
  for (addrinfo* a = res; a; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int yes = 1;
    // SO_REUSEADDR only (no SO_REUSEPORT): a second server on the port fails.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 4096) == 0) break;
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  if (fd < 0) {
    throw_input_error("cannot bind {}:{} (in use, or not an address of this machine)", t.opt.host,
                      t.opt.port);
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int bound =
      ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                       : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  // Connections beyond what the descriptor limit allows get a 503 instead
  // of failing accept(); keep some descriptors for the rest of the process.
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const size_t room = rl.rlim_cur > 256 ? rl.rlim_cur - 128 : rl.rlim_cur / 2;
    if (t.opt.max_connections > room) t.opt.max_connections = room;
  }
  t.listen_fd = fd;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  epoll_ctl(t.epoll_fd, EPOLL_CTL_ADD, fd, &ev);
  return bound;
}

void HttpTransport::run() { impl_->run(); }

void HttpTransport::stop(std::chrono::milliseconds flush_timeout) {
  Impl* t = impl_.get();
  t->post([t, flush_timeout] {
    t->stop_deadline = Clock::now() + flush_timeout;
    t->begin_stop();
  });
}

size_t HttpTransport::num_connections() const { return impl_->open_count.load(); }

void Reply::send(HttpResponse response) const {
  auto* t = static_cast<HttpTransport::Impl*>(queue_->impl);
  queue_->post([t, c = conn_, e = exchange_, r = std::move(response)]() mutable {
    t->send(c, e, std::move(r));
  });
}

void Reply::start_stream(int status, std::string content_type, HttpHeaders headers) const {
  auto* t = static_cast<HttpTransport::Impl*>(queue_->impl);
  queue_->post([t, c = conn_, e = exchange_, status, type = std::move(content_type),
                h = std::move(headers)] { t->start_stream(c, e, status, type, h); });
}

void Reply::write(std::string chunk) const {
  auto* t = static_cast<HttpTransport::Impl*>(queue_->impl);
  queue_->post([t, c = conn_, e = exchange_, d = std::move(chunk)] { t->write_chunk(c, e, d); });
}

void Reply::end() const {
  auto* t = static_cast<HttpTransport::Impl*>(queue_->impl);
  queue_->post([t, c = conn_, e = exchange_] { t->end_stream(c, e); });
}

void Reply::on_cancel(std::function<void()> fn) const {
  auto* t = static_cast<HttpTransport::Impl*>(queue_->impl);
  queue_->post([t, c = conn_, e = exchange_, f = std::move(fn)]() mutable {
    t->set_cancel(c, e, std::move(f));
  });
}

}  // namespace pagoda::server
