#include "models/json_fields.h"

#include <filesystem>
#include <fstream>

namespace pagoda {

nlohmann::json read_json_file(const std::string& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    throw_input_error("{}: not found (expected a JSON file there)", file);
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw_input_error("{}: cannot open for reading", file);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; keep the
    // "parse error at line L, column C: ..." part the user needs.
    std::string why = e.what();
    if (const size_t tag_end = why.find("] ");
        why.rfind("[json.exception", 0) == 0 && tag_end != std::string::npos) {
      why.erase(0, tag_end + 2);
    }
    throw_input_error("{}: invalid JSON: {}", file, why);
  }
}

std::string describe_json(const nlohmann::json& v) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  constexpr size_t kMaxChars = 60;
  if (v.is_string() && v.get_ref<const std::string&>().size() > kMaxChars) {
    // Cut by bytes; the replace handler mends a UTF-8 sequence cut in two.
    const nlohmann::json cut = v.get_ref<const std::string&>().substr(0, kMaxChars);
    return cut.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "...";
  }
  return v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace pagoda
