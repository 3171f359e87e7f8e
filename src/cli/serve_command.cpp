// `pagoda serve`: the OpenAI-compatible server. SIGINT/SIGTERM stop it
// gracefully: no new requests, in-flight ones finish within the grace
// period (the rest are aborted), then exit 0.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "engine/async_engine.h"
#include "server/openai_server.h"

namespace pagoda::cli {

namespace {

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

struct ServeArgs {
  std::string model;
  server::ServerOptions server;
  double grace_seconds = 10;
  EngineOptions engine;
  bool enable_auto_tool_choice = false;
  std::string tool_call_parser;
};

int run_serve(ServeArgs& a) {
  // Signals are taken by sigwait below, so block them in every thread we start.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (a.server.served_model_name.empty()) a.server.served_model_name = a.model;
  if (a.enable_auto_tool_choice) a.server.tool_call_parser = a.tool_call_parser;
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
  std::fprintf(stderr,
               "pagoda: %s received, shutting down (grace %.1f s; a second signal exits at once)\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", a.grace_seconds);
  std::fflush(stderr);
  // The shutdown runs beside this thread, which keeps waiting for signals:
  // a second SIGINT/SIGTERM ends the process at once.
  std::atomic<bool> stopped{false};
  const pthread_t signal_thread = pthread_self();
  std::thread shutdown_thread([&] {
    http.start_draining();
    engine.shutdown(std::chrono::milliseconds(static_cast<int64_t>(a.grace_seconds * 1000)));
    // Every request has its final output now (finished or aborted); the
    // server writes each response to its end ([DONE] included) and closes.
    http.stop(std::chrono::seconds(10));
    server_thread.join();
    stopped = true;
    // Wakes the sigwait below; directed at that thread, so no other
    // thread can take it.
    pthread_kill(signal_thread, SIGTERM);
  });
  sigwait(&signals, &sig);
  if (!stopped) {
    std::fprintf(stderr, "pagoda: second %s, exiting now\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    std::fflush(stderr);
    std::_Exit(1);
  }
  shutdown_thread.join();
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
                  "Sequences (prompts x n) in flight before new requests get 503")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", args->server.max_body_bytes,
                  "Largest request body accepted (413 beyond)")
      ->check(CLI::Range(1024, 1 << 30))
      ->capture_default_str();
  cmd->add_option("--http-threads", args->server.http_threads,
                  "Threads that parse requests and build responses (connections are not "
                  "bound to threads)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--max-connections", args->server.max_connections,
                  "Open HTTP connections at once (503 beyond; capped by the descriptor limit)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_option_function<double>(
         "--header-timeout", [args](double s) { args->server.header_timeout = to_ms(s); },
         "Seconds a request's line and headers may take from its first byte (408 beyond) [10]")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option_function<double>(
         "--body-timeout", [args](double s) { args->server.body_timeout = to_ms(s); },
         "Seconds a request body may take after its headers (408 beyond) [30]")
      ->check(CLI::Range(0.1, 3600.0));
  cmd->add_option_function<double>(
         "--keep-alive-timeout", [args](double s) { args->server.keep_alive_timeout = to_ms(s); },
         "Seconds an idle keep-alive connection stays open [60]")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_option("--reasoning-parser", args->server.reasoning_parser,
                  "Split chat output into reasoning_content and content (vLLM's parsers: qwen3, "
                  "deepseek_r1, deepseek_v3)")
      ->check(CLI::IsMember({"qwen3", "deepseek_r1", "deepseek_v3"}));
  auto* auto_tools =
      cmd->add_flag("--enable-auto-tool-choice", args->enable_auto_tool_choice,
                    "Return the tool calls a model writes as OpenAI tool_calls (needs "
                    "--tool-call-parser)");
  auto* tool_parser =
      cmd->add_option("--tool-call-parser", args->tool_call_parser,
                      "The models' tool-call format (vLLM's parsers: hermes for Qwen3, "
                      "deepseek_v3, deepseek_v31)")
          ->check(CLI::IsMember({"hermes", "deepseek_v3", "deepseek_v31"}));
  // As vLLM: one without the other does nothing, which is refused rather
  // than left for a client to discover.
  auto_tools->needs(tool_parser);
  tool_parser->needs(auto_tools);
  cmd->add_option("--shutdown-grace", args->grace_seconds,
                  "Seconds in-flight requests get on SIGINT/SIGTERM")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  add_engine_flags(*cmd, args->engine);
  return
      [args] { return run_on_rank0(args->model, args->engine, [&] { return run_serve(*args); }); };
}

}  // namespace pagoda::cli
