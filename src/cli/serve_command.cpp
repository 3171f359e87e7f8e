// `pagoda serve`: the OpenAI-compatible server. SIGINT/SIGTERM stop it
// gracefully: no new requests, in-flight ones finish within the grace
// period (the rest are aborted), then exit 0.
#include <signal.h>

#include <cstdio>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/async_engine.h"
#include "server/openai_server.h"

namespace pagoda::cli {

namespace {

struct ServeArgs {
  std::string model;
  server::ServerOptions server;
  double grace_seconds = 10;
  EngineOptions engine;
};

int run_serve(ServeArgs& a) {
  // Signals are taken by sigwait below, so block them in every thread we start.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (a.server.served_model_name.empty()) a.server.served_model_name = a.model;
  AsyncEngine engine(a.model, a.engine);
  print_engine_summary(engine.engine());
  server::OpenAIServer http(engine, a.server);
  const int port = http.bind();
  std::fprintf(stderr, "pagoda: serving %s as '%s' on http://%s:%d\n", a.model.c_str(),
               a.server.served_model_name.c_str(), a.server.host.c_str(), port);
  std::fflush(stderr);
  std::thread server_thread([&] { http.serve(); });

  int sig = 0;
  sigwait(&signals, &sig);
  std::fprintf(stderr, "pagoda: %s received, shutting down (grace %.1f s)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", a.grace_seconds);
  http.start_draining();
  engine.shutdown(std::chrono::milliseconds(static_cast<int64_t>(a.grace_seconds * 1000)));
  http.stop();
  server_thread.join();
  std::fprintf(stderr, "pagoda: stopped\n");
  return 0;
}

}  // namespace

Runner add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API");
  cmd->add_option("--model,-m", args->model, "Model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--host", args->server.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", args->server.port, "Port (0 = any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--served-model-name", args->server.served_model_name,
                  "Model name clients use (default: the --model path)");
  cmd->add_option("--api-key", args->server.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 routes");
  cmd->add_option("--max-pending-requests", args->server.max_pending_requests,
                  "Requests in flight before new ones get 503")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", args->server.max_body_bytes,
                  "Largest request body accepted (413 beyond)")
      ->check(CLI::Range(1024, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--http-threads", args->server.http_threads, "Concurrent HTTP connections served")
      ->check(CLI::Range(2, 4096))
      ->capture_default_str();
  cmd->add_option("--shutdown-grace", args->grace_seconds,
                  "Seconds in-flight requests get on SIGINT/SIGTERM")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  add_engine_flags(*cmd, args->engine);
  return
      [args] { return run_on_rank0(args->model, args->engine, [&] { return run_serve(*args); }); };
}

}  // namespace pagoda::cli
