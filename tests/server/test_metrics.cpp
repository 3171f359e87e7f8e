// /metrics text: Pagoda's names and vLLM's (issue 24, 4.9), in a form a
// Prometheus scraper accepts: one HELP/TYPE per family, every sample of a
// declared family, labels quoted and escaped.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "server/metrics.h"

namespace pagoda::server {
namespace {

RequestOutput finished(FinishReason reason, int64_t prompt, int64_t output) {
  RequestOutput out;
  out.finished = true;
  out.finish_reason = reason;
  out.metrics.num_prompt_tokens = prompt;
  out.metrics.num_output_tokens = output;
  out.metrics.time_to_first_token_s = 0.02;
  out.metrics.time_per_output_token_s = 0.003;
  out.metrics.e2e_latency_s = 0.3;
  return out;
}

// sample line ("name{labels}" -> value) of the rendered text.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

TEST(Metrics, ExportsSpeculativeDecodingCounters) {
  Metrics m;
  EngineStats s;
  s.spec_decode.record(4, 3);
  s.spec_decode.record(4, 1);
  s.spec_decode.record(2, 0);
  const auto v = samples(m.render(s, "stories"));
  const std::string l = R"({model_name="stories",engine="0"})";
  EXPECT_EQ(v.at("vllm:spec_decode_num_drafts" + l), 3);
  EXPECT_EQ(v.at("vllm:spec_decode_num_draft_tokens" + l), 10);
  EXPECT_EQ(v.at("vllm:spec_decode_num_accepted_tokens" + l), 4);
  EXPECT_EQ(v.at(R"(vllm:spec_decode_num_accepted_tokens_per_pos{model_name="stories",engine="0",position="0"})"), 2);
  EXPECT_EQ(v.at(R"(vllm:spec_decode_num_accepted_tokens_per_pos{model_name="stories",engine="0",position="1"})"), 1);
  EXPECT_EQ(v.at(R"(vllm:spec_decode_num_accepted_tokens_per_pos{model_name="stories",engine="0",position="2"})"), 1);
  EXPECT_EQ(v.at(R"(vllm:spec_decode_num_accepted_tokens_per_pos{model_name="stories",engine="0",position="3"})"), 0);
  EXPECT_EQ(v.at("pagoda_spec_decode_num_accepted_tokens_total"), 4);
  EXPECT_EQ(v.at(R"(pagoda_spec_decode_num_accepted_tokens_per_pos_total{position="0"})"), 2);
  EXPECT_DOUBLE_EQ(v.at("pagoda_spec_decode_acceptance_rate"), 0.4);
  EXPECT_DOUBLE_EQ(v.at("pagoda_spec_decode_mean_acceptance_length"), 1.0 + 4.0 / 3.0);
}

TEST(Metrics, ExportsPreemptionsAndVllmNames) {
  Metrics m;
  m.record_request(finished(FinishReason::Stop, 10, 5));
  m.record_request(finished(FinishReason::Length, 20, 16));
  m.record_request(finished(FinishReason::Length, 30, 16));
  m.record_aborted();
  EngineStats s;
  s.num_running = 3;
  s.num_waiting = 4;
  s.kv_blocks_total = 100;
  s.kv_blocks_free = 25;
  s.prefix_cache_queried_tokens = 60;
  s.prefix_cache_hit_tokens = 16;
  s.num_preemptions = 7;
  const std::string text = m.render(s, "stories");
  const auto v = samples(text);
  const std::string l = R"({model_name="stories",engine="0"})";
  EXPECT_EQ(v.at("pagoda_num_preemptions_total"), 7);
  EXPECT_EQ(v.at("vllm:num_preemptions_total" + l), 7);
  EXPECT_EQ(v.at("vllm:num_requests_running" + l), 3);
  EXPECT_EQ(v.at("vllm:num_requests_waiting" + l), 4);
  EXPECT_DOUBLE_EQ(v.at("vllm:kv_cache_usage_perc" + l), 0.75);
  EXPECT_DOUBLE_EQ(v.at("vllm:gpu_cache_usage_perc" + l), 0.75);
  EXPECT_EQ(v.at("vllm:prefix_cache_queries_total" + l), 60);
  EXPECT_EQ(v.at("vllm:prefix_cache_hits_total" + l), 16);
  EXPECT_EQ(v.at("vllm:prompt_tokens_total" + l), 60);
  EXPECT_EQ(v.at("vllm:generation_tokens_total" + l), 37);
  EXPECT_EQ(
      v.at(R"(vllm:request_success_total{model_name="stories",engine="0",finished_reason="stop"})"),
      1);
  EXPECT_EQ(
      v.at(
          R"(vllm:request_success_total{model_name="stories",engine="0",finished_reason="length"})"),
      2);
  EXPECT_EQ(
      v.at(
          R"(vllm:request_success_total{model_name="stories",engine="0",finished_reason="abort"})"),
      1);
  EXPECT_EQ(v.at("pagoda_requests_finished_total"), 3);
  EXPECT_EQ(v.at("vllm:time_to_first_token_seconds_count" + l), 3);
  EXPECT_EQ(
      v.at(R"(vllm:time_to_first_token_seconds_bucket{model_name="stories",engine="0",le="0.05"})"),
      3);
  EXPECT_EQ(
      v.at(R"(vllm:time_to_first_token_seconds_bucket{model_name="stories",engine="0",le="0.01"})"),
      0);
  EXPECT_EQ(
      v.at(R"(vllm:e2e_request_latency_seconds_bucket{model_name="stories",engine="0",le="+Inf"})"),
      3);
  EXPECT_EQ(v.at("vllm:request_prompt_tokens_sum" + l), 60);
  EXPECT_EQ(
      v.at(R"(vllm:request_generation_tokens_bucket{model_name="stories",engine="0",le="10"})"), 1);
  EXPECT_EQ(v.at("pagoda_time_to_first_token_seconds_count"), 3);
}

TEST(Metrics, TextIsWellFormed) {
  Metrics m;
  m.record_request(finished(FinishReason::Stop, 3, 2));
  const std::string text = m.render(EngineStats{}, "a \"quoted\" \\ name\n");
  std::set<std::string> declared, typed;
  std::istringstream in(text);
  std::string line;
  const std::regex sample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_]+="([^"\\\n]|\\.)*",?)+\})? -?[0-9.e+-]+$)");
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(typed.insert(name).second) << "family declared twice: " << name;
      continue;
    }
    if (line.rfind("# HELP ", 0) == 0) continue;
    std::smatch match;
    ASSERT_TRUE(std::regex_match(line, match, sample)) << line;
    std::string family = match[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (!typed.count(family) && family.size() > strlen(suffix) &&
          family.compare(family.size() - strlen(suffix), std::string::npos, suffix) == 0)
        family.resize(family.size() - strlen(suffix));
    }
    EXPECT_TRUE(typed.count(family)) << "sample of an undeclared family: " << line;
  }
  EXPECT_NE(text.find(R"(model_name="a \"quoted\" \\ name\n")"), std::string::npos);
}

}  // namespace
}  // namespace pagoda::server
