#include "cli/prompt_file.h"

#include <charconv>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace pagoda::cli {

namespace {

Prompt parse_jsonl_line(const std::string& line, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    throw_input_error("{}: invalid JSON: {}", where, e.what());
  }
  if (j.is_string()) return Prompt::from_text(j.get<std::string>());
  if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) {
    return Prompt::from_text(j["prompt"].get<std::string>());
  }
  if (j.is_object() && j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array()) {
    std::vector<int32_t> ids;
    for (const auto& v : j["prompt_token_ids"]) {
      if (!v.is_number_integer())
        throw_input_error("{}: prompt_token_ids must hold integers", where);
      ids.push_back(v.get<int32_t>());
    }
    if (ids.empty()) throw_input_error("{}: prompt_token_ids is empty", where);
    return Prompt::from_ids(std::move(ids));
  }
  throw_input_error(
      "{}: expected a JSON string or an object with \"prompt\" or \"prompt_token_ids\"", where);
}

}  // namespace

std::vector<Prompt> read_prompt_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_input_error("cannot open prompt file '{}'", path);
  const bool jsonl = path.size() >= 6 && path.substr(path.size() - 6) == ".jsonl";
  std::vector<Prompt> prompts;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    if (jsonl) {
      prompts.push_back(parse_jsonl_line(line, path + ":" + std::to_string(line_no)));
    } else {
      prompts.push_back(Prompt::from_text(line));
    }
  }
  if (prompts.empty()) throw_input_error("prompt file '{}' has no prompts", path);
  return prompts;
}

Prompt parse_prompt_token_ids(const std::string& list, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    size_t b = at, e = end;
    while (b < e && list[b] == ' ') ++b;
    while (e > b && list[e - 1] == ' ') --e;
    int32_t id = 0;
    const auto [ptr, ec] = std::from_chars(list.data() + b, list.data() + e, id);
    if (b == e || ec != std::errc() || ptr != list.data() + e || id < 0) {
      throw_input_error("{} '{}': '{}' is not a token id (a comma list of integers >= 0)", flag,
                        list, list.substr(b, e - b));
    }
    ids.push_back(id);
    at = end + 1;
  }
  return Prompt::from_ids(std::move(ids));
}

}  // namespace pagoda::cli
