#include "server/tool_call_parser.h"

#include "server/marker_scan.h"

namespace pagoda::server {

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view s, size_t i = 0) {
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

}  // namespace

const std::string& ToolCallParser::first_marker() const {
  return format_.region_begin.empty() ? format_.call_begin : format_.region_begin;
}

ToolCallDelta ToolCallParser::feed(std::string_view text) {
  ToolCallDelta out;
  buf_ += text;
  advance(out, false);
  return out;
}

ToolCallDelta ToolCallParser::finish() {
  ToolCallDelta out;
  advance(out, true);
  // Whatever is still undecided is text: a partial marker, or an unclosed
  // region's leftovers (advance has parsed any unclosed call).
  if (state_ == State::Region) {
    // Whitespace after the last call is dropped; a region with nothing
    // parsed in it (or a broken one) is returned as it was written.
    if (region_raw_.empty() && skip_space(buf_) == buf_.size()) {
      buf_.clear();
    } else {
      give_up(out);
    }
  } else {
    out.content += buf_;
    buf_.clear();
  }
  return out;
}

// The region's unused raw text and everything after it become content,
// and no more calls are looked for (what follows a broken call cannot be
// trusted to be one).
void ToolCallParser::give_up(ToolCallDelta& out) {
  out.content += region_raw_;
  out.content += buf_;
  region_raw_.clear();
  buf_.clear();
  state_ = State::Text;
}

void ToolCallParser::advance(ToolCallDelta& out, bool final) {
  const bool hermes = format_.region_begin.empty();
  for (;;) {
    if (state_ == State::Text) {
      out.content += buf_;
      buf_.clear();
      return;
    }
    if (state_ == State::Content) {
      const std::string& marker = first_marker();
      const size_t at = buf_.find(marker);
      if (at == std::string::npos) {
        const size_t keep = final ? 0 : partial_marker_suffix(buf_, marker);
        out.content.append(buf_, 0, buf_.size() - keep);
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      out.content.append(buf_, 0, at);
      buf_.erase(0, at);
      if (!hermes) {  // the region marker is used up; hermes' is the call's own
        region_raw_ = format_.region_begin;
        buf_.erase(0, format_.region_begin.size());
      }
      state_ = State::Region;
      continue;
    }
    // In a region: whitespace, then a call, the region's end, or (hermes,
    // which has no region end) content again.
    const size_t start = skip_space(buf_);
    const std::string_view rest = std::string_view(buf_).substr(start);
    if (rest.empty()) return;  // undecided until more comes
    if (!hermes && rest.starts_with(format_.region_end)) {
      buf_.erase(0, start + format_.region_end.size());
      region_raw_.clear();
      state_ = State::Content;
      continue;
    }
    if (rest.starts_with(format_.call_begin)) {
      const size_t body_at = start + format_.call_begin.size();
      const size_t end = buf_.find(format_.call_end, body_at);
      if (end == std::string::npos && !final) return;  // the call is not complete yet
      const std::string_view body =
          std::string_view(buf_).substr(body_at, end == std::string::npos ? std::string::npos
                                                                          : end - body_at);
      std::optional<ParsedToolCall> call = format_.parse_call(body);
      if (!call) {
        region_raw_ += buf_.substr(0, start);
        buf_.erase(0, start);
        give_up(out);
        return;
      }
      out.calls.push_back(std::move(*call));
      buf_.erase(0, end == std::string::npos ? buf_.size() : end + format_.call_end.size());
      region_raw_.clear();
      continue;
    }
    // Something else. Wait while it may still become a marker.
    const bool may_be_marker =
        std::string_view(format_.call_begin).starts_with(rest) ||
        (!hermes && std::string_view(format_.region_end).starts_with(rest));
    if (may_be_marker && !final) return;
    if (hermes) {  // text after a call: content again (the whitespace before it dropped)
      buf_.erase(0, start);
      region_raw_.clear();
      state_ = State::Content;
      continue;
    }
    region_raw_ += buf_.substr(0, start);
    buf_.erase(0, start);
    give_up(out);
    return;
  }
}

}  // namespace pagoda::server
