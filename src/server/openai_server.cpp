#include "server/openai_server.h"

#include <cstdio>

#include "core/error.h"
#include "server/api_error.h"
#include "server/generation.h"
#include "server/generation_reply.h"
#include "server/json_depth.h"
#include "server/protocol.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"
#include "server/tokenize.h"
#include "server/worker_pool.h"

namespace pagoda::server {

namespace {

using Json = nlohmann::json;

HttpResponse json_response(int status, const Json& body) {
  // Replace, never throw, should any invalid UTF-8 reach a response.
  return {
      status, "application/json", body.dump(-1, ' ', false, Json::error_handler_t::replace), {}};
}

HttpResponse error_response(int status, const std::string& message) {
  const char* type = status == 503 ? "service_unavailable" : "invalid_request_error";
  return json_response(status, ApiError(status, type, message).body());
}

}  // namespace

struct OpenAIServer::Impl {
  Metrics metrics;
  std::atomic<uint64_t> next_id{0};
  std::unique_ptr<GenerationContext> ctx;
  std::unique_ptr<WorkerPool> pool;
  std::unique_ptr<HttpTransport> http;
  // Sequences admitted but not yet visible in engine.num_unfinished().
  std::mutex admit_mu;
  size_t reserved = 0;
};

OpenAIServer::OpenAIServer(AsyncEngine& engine, ServerOptions options)
    : impl_(std::make_unique<Impl>()), engine_(engine), options_(std::move(options)) {
  Impl& s = *impl_;
  s.ctx = std::make_unique<GenerationContext>(GenerationContext{
      engine_, s.metrics, options_.served_model_name, engine_.tokenizer().chat_template()});
  // The CLI checks the names; a wrong one here is a caller's bug.
  if (!options_.reasoning_parser.empty()) {
    s.ctx->reasoning_format = reasoning_format_from_name(options_.reasoning_parser);
    if (!s.ctx->reasoning_format)
      throw InputError("unknown reasoning parser '" + options_.reasoning_parser + "' (known: " +
                       reasoning_format_names() + ")");
  }
  if (!options_.tool_call_parser.empty()) {
    s.ctx->tool_format = tool_call_format(options_.tool_call_parser);
    if (!s.ctx->tool_format)
      throw InputError("unknown tool call parser '" + options_.tool_call_parser + "' (known: " +
                       tool_call_format_names() + ")");
  }
  s.pool = std::make_unique<WorkerPool>(options_.http_threads);
  TransportOptions t;
  t.host = options_.host;
  t.port = options_.port;
  t.max_connections = options_.max_connections;
  t.max_body_bytes = options_.max_body_bytes;
  t.header_timeout = options_.header_timeout;
  t.body_timeout = options_.body_timeout;
  t.idle_timeout = options_.keep_alive_timeout;
  t.error_response = [this](int status, const std::string& message) {
    impl_->metrics.record_http_error();
    return error_response(status, message);
  };
  s.http = std::make_unique<HttpTransport>(
      std::move(t), [this](HttpRequest&& req, Reply reply) { route(std::move(req), reply); });
}

OpenAIServer::~OpenAIServer() {
  // The pool first: its tasks may still post to the transport.
  impl_->pool.reset();
  impl_->http.reset();
}

int OpenAIServer::bind() { return impl_->http->bind(); }

void OpenAIServer::serve() { impl_->http->run(); }

void OpenAIServer::stop(std::chrono::milliseconds flush_timeout) {
  impl_->http->stop(flush_timeout);
}

// Runs on the event loop: liveness and metrics are answered here, so they
// never wait behind request work; everything else goes to the pool.
void OpenAIServer::route(HttpRequest&& req, Reply reply) {
  Impl& s = *impl_;
  const std::string& path = req.path;
  const bool get = req.method == "GET", post = req.method == "POST";
  if (get && path == "/health") {
    reply.send(json_response(200, {{"status", "ok"}}));
    return;
  }
  if (get && path == "/metrics") {
    reply.send({200, "text/plain; version=0.0.4", s.metrics.render(engine_.stats(), options_.served_model_name), {}});
    return;
  }
  enum class Route { Models, Tokenize, Detokenize, Completions, Chat };
  Route r;
  if (get && path == "/v1/models") {
    r = Route::Models;
  } else if (post && path == "/tokenize") {
    r = Route::Tokenize;
  } else if (post && path == "/detokenize") {
    r = Route::Detokenize;
  } else if (post && path == "/v1/completions") {
    r = Route::Completions;
  } else if (post && path == "/v1/chat/completions") {
    r = Route::Chat;
  } else {
    s.metrics.record_http_error();
    reply.send(error_response(404, "not found"));
    return;
  }
  // Auth before anything reads the body.
  const std::string* auth = req.header("authorization");
  if (!options_.api_key.empty() && (!auth || *auth != "Bearer " + options_.api_key)) {
    s.metrics.record_http_error();
    reply.send(json_response(401, ApiError(401, "authentication_error",
                                           "invalid or missing API key (Authorization: Bearer KEY)")
                                      .body()));
    return;
  }
  auto shared = std::make_shared<HttpRequest>(std::move(req));
  s.pool->submit([this, r, post, shared, reply] {
    Impl& s = *impl_;
    const HttpRequest& req = *shared;
    try {
      // Before any JSON parser runs: a deep body would overflow the stack.
      // Every body is read as JSON whatever its Content-Type (curl -d sends
      // application/x-www-form-urlencoded), as vLLM does.
      if (post && json_exceeds_depth(req.body)) {
        throw bad_request("the JSON body nests deeper than " + std::to_string(kMaxJsonDepth) +
                              " levels (arrays/objects)",
                          "body");
      }
      switch (r) {
        case Route::Models: {
          const Json model = {{"id", options_.served_model_name},
                              {"object", "model"},
                              {"created", 0},
                              {"owned_by", "pagoda"},
                              {"max_model_len", engine_.engine().max_model_len()}};
          reply.send(json_response(200, {{"object", "list"}, {"data", Json::array({model})}}));
          break;
        }
        case Route::Tokenize:
          reply.send(json_response(200, tokenize(*s.ctx, req.body)));
          break;
        case Route::Detokenize: {
          const auto j = parse_json_object(req.body);
          if (!j.contains("tokens") || !j["tokens"].is_array())
            throw bad_request("tokens must be a list of ids", "tokens");
          std::vector<int32_t> ids;
          const int32_t vocab = engine_.tokenizer().vocab_size();
          for (const auto& v : j["tokens"]) {
            if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab) {
              throw bad_request("tokens must be ids in [0, " + std::to_string(vocab) + ")",
                                "tokens");
            }
            ids.push_back(v.get<int32_t>());
          }
          reply.send(json_response(200, {{"prompt", engine_.tokenizer().decode(ids, false)}}));
          break;
        }
        case Route::Completions:
        case Route::Chat:
          generate(r == Route::Chat, req, reply);
          break;
      }
    } catch (const ApiError& e) {
      s.metrics.record_http_error();
      reply.send(json_response(e.status(), e.body()));
    } catch (const InputError& e) {
      s.metrics.record_http_error();
      reply.send(json_response(400, bad_request(e.what()).body()));
    } catch (const std::exception& e) {
      s.metrics.record_http_error();
      std::fprintf(stderr, "pagoda: internal error: %s\n", e.what());
      reply.send(json_response(500, ApiError(500, "internal_error", e.what()).body()));
    }
  });
}

// On a pool thread. Admission counts sequences (prompts x n), the unit the
// engine schedules, not HTTP requests: one request can hold thousands.
void OpenAIServer::generate(bool chat, const HttpRequest& req, const Reply& reply) {
  Impl& s = *impl_;
  if (draining_) throw ApiError(503, "service_unavailable", "the server is shutting down");
  const GenerationRequest r =
      chat ? parse_chat_request(req.body) : parse_completion_request(req.body);
  const size_t prompts = chat ? 1 : r.text_prompts.size() + r.id_prompts.size();
  const size_t sequences = prompts * static_cast<size_t>(std::max(r.n, 1));
  const size_t limit = options_.max_pending_requests;
  if (sequences > limit) {
    throw bad_request("this request asks for " + std::to_string(sequences) +
                          " sequences (prompts x n); the server runs at most " +
                          std::to_string(limit) + " at once (--max-pending-requests)",
                      "n");
  }
  {
    std::lock_guard lock(s.admit_mu);
    if (engine_.num_unfinished() + s.reserved + sequences > limit) {
      throw ApiError(503, "service_unavailable", "too many requests in flight; retry later");
    }
    s.reserved += sequences;
  }
  // Submitted sequences count in num_unfinished(); release the reservation
  // however submission ends.
  struct Release {
    Impl& s;
    size_t n;
    ~Release() {
      std::lock_guard lock(s.admit_mu);
      s.reserved -= n;
    }
  } release{s, sequences};
  const std::string id = std::string(chat ? "chatcmpl-" : "cmpl-") + std::to_string(s.next_id++);
  Submitted sub = submit_generation(*s.ctx, r, id);
  if (r.stream) {
    reply_with_events(*s.ctx, *s.pool, std::move(sub), reply);
  } else {
    reply_when_complete(*s.ctx, *s.pool, std::move(sub), reply,
                        [](const Json& body) { return json_response(200, body); });
  }
}

}  // namespace pagoda::server
