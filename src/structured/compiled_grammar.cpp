#include "structured/compiled_grammar.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "structured/token_mask.h"
#include "structured/utf8_ranges.h"

namespace pagoda::structured {

namespace {

// The smallest code point a UTF-8 sequence of n bytes may encode (shorter
// encodings are invalid), and the sequence length a lead byte starts.
constexpr uint32_t kMinOfLength[5] = {0, 0, 0x80, 0x800, 0x10000};

int lead_length(uint8_t b) {
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

bool valid_code_point(uint32_t cp, int length) {
  return cp >= kMinOfLength[length] && cp <= kMaxCodePoint && !(cp >= 0xD800 && cp <= 0xDFFF);
}

}  // namespace

std::string MatcherState::key() const {
  std::string k;
  k.resize(1 + ends.size() * sizeof(uint32_t) + frames.size() * sizeof(Frame));
  k[0] = complete ? 1 : 0;
  // (memcpy from an empty vector's null data() is undefined even for 0 bytes.)
  if (!ends.empty()) std::memcpy(k.data() + 1, ends.data(), ends.size() * sizeof(uint32_t));
  if (!frames.empty()) {
    std::memcpy(k.data() + 1 + ends.size() * sizeof(uint32_t), frames.data(),
                frames.size() * sizeof(Frame));
  }
  return k;
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab,
                                 std::string source)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), source_(std::move(source)) {
  grammar_.validate();
  resolve_tokens();
  flatten();
  compute_class_subtrees();
  // The start: the root rule entered as if referenced once.
  std::vector<Frame> stack;
  for (int32_t start : rule_starts_[0]) {
    stack.assign(1, Frame{start, 0, 0, 0});
    decide(stack, initial_);
  }
  mask_cache_ = std::make_unique<MaskCache>();
}

CompiledGrammar::~CompiledGrammar() = default;

// Token terminals get their ids from the vocabulary, and must name a real
// token other than EOS (which the grammar's end allows by itself).
void CompiledGrammar::resolve_tokens() {
  for (Rule& r : grammar_.rules) {
    for (auto& alt : r.alternatives) {
      for (Element& e : alt) {
        if (e.kind != Element::Kind::Token) continue;
        has_token_terminals_ = true;
        if (e.token < 0) {
          const auto id = vocab_->find_token(e.literal);
          if (!id) throw_input_error("grammar: token {} is not a token of the vocabulary", e.literal);
          e.token = *id;
        }
        const std::string name = e.literal.empty() ? fmt::format("<[{}]>", e.token) : e.literal;
        if (e.token >= vocab_->size() || (vocab_->bytes(e.token).empty() && !vocab_->is_special(e.token) &&
                                          !vocab_->is_eos(e.token)))
          throw_input_error("grammar: token {} is not a token of the vocabulary ({} ids)", name, vocab_->size());
        if (vocab_->is_eos(e.token))
          throw_input_error("grammar: token {} is end-of-sequence, which is allowed where the grammar is "
                            "complete and cannot be part of it",
                            name);
      }
    }
  }
}

void CompiledGrammar::flatten() {
  rule_starts_.resize(grammar_.rules.size());
  std::vector<std::pair<std::vector<std::pair<uint32_t, uint32_t>>, int32_t>> classes;
  for (size_t r = 0; r < grammar_.rules.size(); ++r) {
    for (const auto& alt : grammar_.rules[r].alternatives) {
      rule_starts_[r].push_back(static_cast<int32_t>(positions_.size()));
      for (const Element& e : alt) {
        Position p;
        p.kind = e.kind;
        p.min = e.min;
        p.max = e.max;
        p.element = static_cast<int32_t>(elements_.size());
        elements_.push_back(&e);
        // Repeating classes get the subtree bits the mask's shortcut needs
        // (one set per distinct class).
        if (e.kind == Element::Kind::Class && (e.max == kUnbounded || e.max > 1)) {
          auto it = std::find_if(classes.begin(), classes.end(),
                                 [&](const auto& c) { return c.first == e.ranges; });
          if (it == classes.end()) {
            classes.emplace_back(e.ranges, static_cast<int32_t>(classes.size()));
            it = classes.end() - 1;
          }
          p.class_id = it->second;
        }
        positions_.push_back(p);
      }
      Position end;
      end.end = true;
      positions_.push_back(end);
    }
  }
  for (auto& c : classes) class_ranges_.push_back(std::move(c.first));
}

void CompiledGrammar::compute_class_subtrees() {
  in_class_.resize(class_ranges_.size());
  for (size_t id = 0; id < class_ranges_.size(); ++id) {
    Element e;
    e.kind = Element::Kind::Class;
    e.ranges = class_ranges_[id];
    in_class_[id].assign(vocab_->nodes().size(), true);
    // good[d]: the token's bytes from d on are whole characters of the class.
    std::vector<uint8_t> good;
    for (size_t k = 0; k < vocab_->sorted_ids().size(); ++k) {
      const std::string& b = vocab_->bytes(vocab_->sorted_ids()[k]);
      good.assign(b.size() + 1, 0);
      good[b.size()] = 1;
      for (size_t d = b.size(); d-- > 0;) {
        uint32_t cp = 0;
        const size_t n = utf8_decode_one(std::string_view(b).substr(d), &cp);
        good[d] = n > 0 && e.class_contains(cp) && good[d + n];
      }
      for (int32_t node = vocab_->token_node(static_cast<int32_t>(k)); node > 0;
           node = vocab_->nodes()[node].parent) {
        if (!good[vocab_->nodes()[node].depth]) in_class_[id][node] = false;
      }
    }
  }
}

int32_t CompiledGrammar::bump(const Position& p, int32_t count) const {
  // Without an upper bound only "at least min" matters: saturating keeps
  // the states of a long repetition equal (so their masks are cached).
  return p.max == kUnbounded ? std::min(count + 1, p.min) : count + 1;
}

void CompiledGrammar::emit(const std::vector<Frame>& stack, MatcherState& out) const {
  // Drop duplicates: the same stack reached through different paths.
  uint32_t begin = 0;
  for (uint32_t end : out.ends) {
    if (end - begin == stack.size() &&
        std::equal(stack.begin(), stack.end(), out.frames.begin() + begin))
      return;
    begin = end;
  }
  out.frames.insert(out.frames.end(), stack.begin(), stack.end());
  out.ends.push_back(static_cast<uint32_t>(out.frames.size()));
}

// The top frame has just completed `count` repetitions of its element (or
// stands at it with none yet): another repetition, or the next element.
void CompiledGrammar::decide(std::vector<Frame>& stack, MatcherState& out) const {
  const Frame f = stack.back();
  const Position& p = positions_[f.pos];
  if (p.end) {  // the rule is done: return to the caller, which counts one repetition
    stack.pop_back();
    if (stack.empty()) {
      out.complete = true;
    } else {
      const Frame caller = stack.back();
      stack.back().count = bump(positions_[caller.pos], caller.count);
      decide(stack, out);
      stack.back() = caller;
    }
    stack.push_back(f);
    return;
  }
  if (p.max == kUnbounded || f.count < p.max) {
    if (p.kind == Element::Kind::RuleRef) {
      for (int32_t start : rule_starts_[elements_[p.element]->rule]) {
        stack.push_back(Frame{start, 0, 0, 0});
        decide(stack, out);
        stack.pop_back();
      }
    } else {
      emit(stack, out);
    }
  }
  if (f.count >= p.min) {
    stack.back() = Frame{f.pos + 1, 0, 0, 0};
    decide(stack, out);
    stack.back() = f;
  }
}

bool CompiledGrammar::advance(const MatcherState& in, uint8_t b, MatcherState& out) const {
  out.clear();
  thread_local std::vector<Frame> stack;
  uint32_t begin = 0;
  for (uint32_t end : in.ends) {
    stack.assign(in.frames.begin() + begin, in.frames.begin() + end);
    begin = end;
    Frame& f = stack.back();
    const Position& p = positions_[f.pos];
    if (p.kind == Element::Kind::Token) continue;  // matched by id only (advance_token)
    const Element& e = *elements_[p.element];
    if (p.kind == Element::Kind::Literal) {
      if (static_cast<uint8_t>(e.literal[f.sub]) != b) continue;
      if (++f.sub < static_cast<int32_t>(e.literal.size())) {
        emit(stack, out);
      } else {
        f.sub = 0;
        f.count = bump(p, f.count);
        decide(stack, out);
      }
      continue;
    }
    // A character class, fed one byte of a UTF-8 sequence at a time; a
    // partial character survives only if some completion is in the class.
    uint32_t cp;
    int length;
    int remaining;
    if ((f.rem & 0xF) == 0) {
      if (b < 0x80) {
        if (!e.class_contains(b)) continue;
        f.count = bump(p, f.count);
        decide(stack, out);
        continue;
      }
      length = lead_length(b);
      if (length == 0) continue;
      cp = b & (0x7F >> length);
      remaining = length - 1;
    } else {
      if ((b & 0xC0) != 0x80) continue;
      length = f.rem >> 4;
      cp = (static_cast<uint32_t>(f.sub) << 6) | (b & 0x3F);
      remaining = (f.rem & 0xF) - 1;
    }
    if (remaining == 0) {
      if (!valid_code_point(cp, length) || !e.class_contains(cp)) continue;
      f.sub = 0;
      f.rem = 0;
      f.count = bump(p, f.count);
      decide(stack, out);
      continue;
    }
    const uint32_t lo = std::max(cp << (6 * remaining), kMinOfLength[length]);
    const uint32_t hi = std::min((cp << (6 * remaining)) | ((1u << (6 * remaining)) - 1), kMaxCodePoint);
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF) || !e.class_intersects(lo, hi)) continue;
    f.sub = static_cast<int32_t>(cp);
    f.rem = (length << 4) | remaining;
    emit(stack, out);
  }
  return !out.dead();
}

bool CompiledGrammar::advance_token(const MatcherState& in, int32_t id, MatcherState& out) const {
  out.clear();
  thread_local std::vector<Frame> stack;
  uint32_t begin = 0;
  for (uint32_t end : in.ends) {
    const Frame& top = in.frames[end - 1];
    const Position& p = positions_[top.pos];
    if (p.kind == Element::Kind::Token && elements_[p.element]->token == id) {
      stack.assign(in.frames.begin() + begin, in.frames.begin() + end);
      stack.back().count = bump(p, top.count);
      decide(stack, out);
    }
    begin = end;
  }
  return !out.dead();
}

void CompiledGrammar::merge(const MatcherState& from, MatcherState& into) const {
  thread_local std::vector<Frame> stack;
  uint32_t begin = 0;
  for (uint32_t end : from.ends) {
    stack.assign(from.frames.begin() + begin, from.frames.begin() + end);
    emit(stack, into);
    begin = end;
  }
  into.complete = into.complete || from.complete;
}

bool CompiledGrammar::advance_bytes(MatcherState& state, std::string_view bytes) const {
  MatcherState next;
  for (char c : bytes) {
    if (!advance(state, static_cast<uint8_t>(c), next)) return false;
    std::swap(state, next);
  }
  return true;
}

}  // namespace pagoda::structured
