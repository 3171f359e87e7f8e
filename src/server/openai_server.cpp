#include "server/openai_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>

#include "core/error.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/protocol.h"
#include "server/tokenize.h"

namespace pagoda::server {

namespace {

using Json = nlohmann::json;

void send_json(httplib::Response& res, int status, const Json& body) {
  res.status = status;
  // Replace, never throw, should any invalid UTF-8 reach a response.
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

}  // namespace

struct OpenAIServer::Impl {
  httplib::Server http;
  int listen_fd = -1;
  Metrics metrics;
  std::atomic<uint64_t> next_id{0};
  std::unique_ptr<GenerationContext> ctx;
};

OpenAIServer::OpenAIServer(AsyncEngine& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>()), engine_(engine), options_(std::move(options)) {
  Impl& s = *impl_;
  s.ctx = std::make_unique<GenerationContext>(GenerationContext{
      engine_, s.metrics, options_.served_model_name, engine_.tokenizer().chat_template()});
  httplib::Server& http = s.http;
  const int threads = options_.http_threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_payload_max_length(options_.max_body_bytes);
  http.set_keep_alive_max_count(1000);
  http.set_tcp_nodelay(true);
  // Debian's httplib sets SO_REUSEPORT, which would let two servers share a
  // port silently; use SO_REUSEADDR only, and remember the socket to widen
  // its listen backlog after bind (the library hard-codes 5).
  http.set_socket_options([this](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    impl_->listen_fd = sock;
  });

  // Errors from httplib itself (unknown route, body too large) get JSON too.
  http.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
    impl_->metrics.record_http_error();
    if (!res.body.empty()) return;
    const char* msg = res.status == 404   ? "not found"
                      : res.status == 413 ? "the request body is too large"
                                          : "request failed";
    send_json(res, res.status, ApiError(res.status, "invalid_request_error", msg).body());
  });
  http.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        impl_->metrics.record_http_error();
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        std::fprintf(stderr, "pagoda: internal error: %s\n", what.c_str());
        send_json(res, 500, ApiError(500, "internal_error", what).body());
      });

  // Wraps a handler: auth, draining, and ApiError -> JSON error response.
  auto guarded = [this](bool needs_auth, auto handler) {
    return [this, needs_auth, handler](const httplib::Request& req, httplib::Response& res) {
      try {
        if (needs_auth && !options_.api_key.empty() &&
            req.get_header_value("Authorization") != "Bearer " + options_.api_key) {
          throw ApiError(401, "authentication_error",
                         "invalid or missing API key (Authorization: Bearer KEY)");
        }
        handler(req, res);
      } catch (const ApiError& e) {
        impl_->metrics.record_http_error();
        send_json(res, e.status(), e.body());
      } catch (const InputError& e) {
        impl_->metrics.record_http_error();
        send_json(res, 400, bad_request(e.what()).body());
      }
    };
  };

  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"status", "ok"}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(impl_->metrics.render(engine_.stats(), options_.served_model_name),
                    "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", guarded(true, [this](const httplib::Request&, httplib::Response& res) {
             const Json model = {{"id", options_.served_model_name},
                                 {"object", "model"},
                                 {"created", 0},
                                 {"owned_by", "pagoda"},
                                 {"max_model_len", engine_.engine().max_model_len()}};
             send_json(res, 200, {{"object", "list"}, {"data", Json::array({model})}});
           }));
  http.Post("/tokenize", guarded(true, [this](const httplib::Request& req, httplib::Response& res) {
              send_json(res, 200, tokenize(*impl_->ctx, req.body));
            }));
  http.Post(
      "/detokenize", guarded(true, [this](const httplib::Request& req, httplib::Response& res) {
        const auto j = parse_json_object(req.body);
        if (!j.contains("tokens") || !j["tokens"].is_array())
          throw bad_request("tokens must be a list of ids", "tokens");
        std::vector<int32_t> ids;
        const int32_t vocab = engine_.tokenizer().vocab_size();
        for (const auto& v : j["tokens"]) {
          if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab) {
            throw bad_request("tokens must be ids in [0, " + std::to_string(vocab) + ")", "tokens");
          }
          ids.push_back(v.get<int32_t>());
        }
        send_json(res, 200, {{"prompt", engine_.tokenizer().decode(ids, false)}});
      }));

  auto generate = [this](bool chat) {
    return [this, chat](const httplib::Request& req, httplib::Response& res) {
      if (draining_) throw ApiError(503, "service_unavailable", "the server is shutting down");
      if (engine_.num_unfinished() >= options_.max_pending_requests) {
        throw ApiError(503, "service_unavailable", "too many requests in flight; retry later");
      }
      const GenerationRequest r =
          chat ? parse_chat_request(req.body) : parse_completion_request(req.body);
      const std::string id =
          std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(impl_->next_id++);
      Submitted sub = submit_generation(*impl_->ctx, r, id);
      if (!r.stream) {
        send_json(res, 200, collect_response(*impl_->ctx, sub));
        return;
      }
      auto events = std::make_shared<EventStream>(*impl_->ctx, std::move(sub));
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [events](size_t, httplib::DataSink& sink) {
            bool finished = false;
            const std::string data = events->next_events(&finished);
            if (!data.empty() && !sink.write(data.data(), data.size())) {
              events->abort_all("client disconnected");
              return false;
            }
            if (finished) sink.done();
            return true;
          },
          [events](bool success) {
            if (!success) events->abort_all("client disconnected");
          });
    };
  };
  http.Post("/v1/completions", guarded(true, generate(false)));
  http.Post("/v1/chat/completions", guarded(true, generate(true)));
}

OpenAIServer::~OpenAIServer() { stop(); }

int OpenAIServer::bind() {
  httplib::Server& http = impl_->http;
  int port = options_.port;
  if (port == 0) {
    port = http.bind_to_any_port(options_.host);
    if (port < 0) throw_input_error("cannot bind {}:0", options_.host);
  } else if (!http.bind_to_port(options_.host, port)) {
    throw_input_error("cannot bind {}:{} (in use, or not an address of this machine)",
                      options_.host, port);
  }
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, 4096);
  return port;
}

void OpenAIServer::serve() { impl_->http.listen_after_bind(); }

void OpenAIServer::stop() {
  if (impl_->http.is_running()) impl_->http.stop();
}

}  // namespace pagoda::server
