// Jinja2 lexer and recursive-descent parser. Operator precedence follows
// Jinja2's parser: or < and < not < comparisons < + - < ~ < * / // % < ** <
// unary < postfix (attribute, subscript, call) and filters.
#include <cctype>

#include "core/error.h"
#include "tokenizer/jinja/ast.h"

namespace pagoda::jinja {

namespace {

// ---- Template segments: text, {{ expression }}, {% statement %} ----------
struct Segment {
  enum Kind { Text, Expression, Statement } kind;
  std::string content;
  int line;
};

int line_at(const std::string& s, size_t pos) {
  return 1 + static_cast<int>(
                 std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(pos), '\n'));
}

// Finds the closing marker of a tag, skipping quoted strings.
size_t find_tag_end(const std::string& s, size_t from, const char* close) {
  char quote = 0;
  for (size_t i = from; i + 1 < s.size(); ++i) {
    if (quote) {
      if (s[i] == '\\')
        ++i;
      else if (s[i] == quote)
        quote = 0;
      continue;
    }
    if (s[i] == '\'' || s[i] == '"')
      quote = s[i];
    else if (s[i] == close[0] && s[i + 1] == close[1])
      return i;
  }
  return std::string::npos;
}

std::vector<Segment> split_segments(const std::string& src) {
  std::vector<Segment> out;
  size_t pos = 0;
  bool strip_next_ws = false, trim_next_newline = false;
  while (pos <= src.size()) {
    size_t open = src.find('{', pos);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' &&
           src[open + 1] != '%' && src[open + 1] != '#') {
      open = src.find('{', open + 1);
    }
    if (open != std::string::npos && open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(pos, open == std::string::npos ? std::string::npos : open - pos);
    // Does `text` begin at the start of a source line (for lstrip_blocks)?
    bool begins_line = pos == 0 || src[pos - 1] == '\n';
    if (strip_next_ws) {
      text.erase(0, text.find_first_not_of(" \t\r\n"));
    } else if (trim_next_newline && !text.empty() && text[0] == '\n') {
      text.erase(0, 1);  // trim_blocks
      begins_line = true;
    }
    strip_next_ws = trim_next_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Segment::Text, text, line_at(src, pos)});
      break;
    }
    const char type = src[open + 1];
    const bool strip_before = open + 2 < src.size() && src[open + 2] == '-';
    if (strip_before) {
      const size_t keep = text.find_last_not_of(" \t\r\n");
      text.erase(keep == std::string::npos ? 0 : keep + 1);
    } else if (type != '{') {  // lstrip_blocks: indentation before a block tag goes
      const size_t nl = text.find_last_of('\n');
      const size_t start = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || begins_line) &&
          text.find_first_not_of(" \t", start) == std::string::npos) {
        text.erase(start);
      }
    }
    if (!text.empty()) out.push_back({Segment::Text, text, line_at(src, pos)});
    const char* close = type == '{' ? "}}" : type == '%' ? "%}" : "#}";
    const size_t body = open + (strip_before ? 3 : 2);
    const size_t end = type == '#' ? src.find("#}", body) : find_tag_end(src, body, close);
    if (end == std::string::npos) {
      throw InputError("line " + std::to_string(line_at(src, open)) + ": unclosed tag");
    }
    const bool strip_after = end > body && src[end - 1] == '-';
    std::string inner = src.substr(body, end - body - (strip_after ? 1 : 0));
    if (type == '{') out.push_back({Segment::Expression, inner, line_at(src, open)});
    if (type == '%') out.push_back({Segment::Statement, inner, line_at(src, open)});
    strip_next_ws = strip_after;
    trim_next_newline = !strip_after && type != '{';  // trim_blocks
    pos = end + 2;
  }
  return out;
}

// ---- Expression tokens ----------------------------------------------------
struct Token {
  enum Kind { Name, String, Int, Float, Op, End } kind;
  std::string text;
};

std::vector<Token> tokenize(const std::string& s, int line) {
  std::vector<Token> out;
  auto fail = [&](const std::string& why) -> void {
    throw InputError("line " + std::to_string(line) + ": " + why);
  };
  for (size_t i = 0; i < s.size();) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Name, s.substr(i, j - i)});
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_' ||
                              (s[j] == '.' && !is_float && j + 1 < s.size() &&
                               std::isdigit(static_cast<unsigned char>(s[j + 1]))))) {
        is_float |= s[j] == '.';
        ++j;
      }
      // An exponent (1e20, 2.5E-3) makes a float too.
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {
        size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k;
          is_float = true;
          j = k;
        }
      }
      std::string num = s.substr(i, j - i);
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      out.push_back({is_float ? Token::Float : Token::Int, num});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string str;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          str += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n':
            str += '\n';
            break;
          case 't':
            str += '\t';
            break;
          case 'r':
            str += '\r';
            break;
          case '\\':
            str += '\\';
            break;
          case '\'':
            str += '\'';
            break;
          case '"':
            str += '"';
            break;
          default:
            str += '\\';
            str += e;
        }
      }
      if (j >= s.size()) fail("unterminated string");
      out.push_back({Token::String, str});
      i = j + 1;
    } else {
      static const char* kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*",
                                   "/",  "%",  "~",  "<",  ">",  "(",  ")", "[", "]",
                                   "{",  "}",  ",",  ".",  ":",  "|",  "="};
      bool matched = false;
      for (const char* op : kOps) {
        const size_t n = std::strlen(op);
        if (s.compare(i, n, op) == 0) {
          out.push_back({Token::Op, op});
          i += n;
          matched = true;
          break;
        }
      }
      if (!matched) fail(std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Token::End, ""});
  return out;
}

class ExprParser {
 public:
  ExprParser(std::vector<Token> tokens, int line) : t_(std::move(tokens)), line_(line) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw InputError(
        "line " + std::to_string(line_) + ": " + why +
        (peek().kind == Token::End ? " at end of tag" : " near '" + peek().text + "'"));
  }
  const Token& peek(size_t k = 0) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  bool at_end() const { return peek().kind == Token::End; }
  bool is_op(const char* op, size_t k = 0) const {
    return peek(k).kind == Token::Op && peek(k).text == op;
  }
  bool is_name(const char* n, size_t k = 0) const {
    return peek(k).kind == Token::Name && peek(k).text == n;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    ++pos_;
    return true;
  }
  bool accept_name(const char* n) {
    if (!is_name(n)) return false;
    ++pos_;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "'");
  }
  std::string expect_name() {
    if (peek().kind != Token::Name) fail("expected a name");
    return t_[pos_++].text;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected token");
  }

  ExprPtr make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }
  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::Binary);
    e->name = op;
    e->items.push_back(std::move(a));
    e->items.push_back(std::move(b));
    return e;
  }

  ExprPtr expression() {  // x if cond else y
    ExprPtr value = or_expr();
    while (accept_name("if")) {
      auto e = make(Expr::Kind::Ternary);
      e->items.push_back(std::move(value));
      e->items.push_back(or_expr());
      e->items.push_back(accept_name("else") ? expression() : nullptr);
      value = std::move(e);
    }
    return value;
  }
  ExprPtr or_expr() {
    ExprPtr e = and_expr();
    while (accept_name("or")) e = binary("or", std::move(e), and_expr());
    return e;
  }
  ExprPtr and_expr() {
    ExprPtr e = not_expr();
    while (accept_name("and")) e = binary("and", std::move(e), not_expr());
    return e;
  }
  ExprPtr not_expr() {
    if (accept_name("not")) {
      auto e = make(Expr::Kind::Unary);
      e->name = "not";
      e->items.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprPtr compare() {
    ExprPtr e = math1();
    for (;;) {
      static const char* kCmp[] = {"==", "!=", "<", ">", "<=", ">="};
      bool done = true;
      for (const char* op : kCmp) {
        if (accept_op(op)) {
          e = binary(op, std::move(e), math1());
          done = false;
          break;
        }
      }
      if (!done) continue;
      if (accept_name("in")) {
        e = binary("in", std::move(e), math1());
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        e = binary("not in", std::move(e), math1());
      } else if (accept_name("is")) {
        auto t = make(Expr::Kind::Test);
        t->negated = accept_name("not");
        t->name = expect_name();
        t->items.push_back(std::move(e));
        if (accept_op("(")) {
          while (!accept_op(")")) {
            t->items.push_back(expression());
            if (!is_op(")")) expect_op(",");
          }
        } else if (!at_end() &&
                   (peek().kind == Token::String || peek().kind == Token::Int ||
                    peek().kind == Token::Float ||
                    (peek().kind == Token::Name && !is_name("and") && !is_name("or") &&
                     !is_name("else") && !is_name("if") && !is_name("in") && !is_name("not")))) {
          t->items.push_back(primary());  // `x is equalto 3`
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }
  ExprPtr math1() {
    ExprPtr e = concat();
    for (;;) {
      if (accept_op("+"))
        e = binary("+", std::move(e), concat());
      else if (accept_op("-"))
        e = binary("-", std::move(e), concat());
      else
        return e;
    }
  }
  ExprPtr concat() {
    ExprPtr e = math2();
    while (accept_op("~")) e = binary("~", std::move(e), math2());
    return e;
  }
  ExprPtr math2() {
    ExprPtr e = power();
    for (;;) {
      const char* op = is_op("*")    ? "*"
                       : is_op("//") ? "//"
                       : is_op("/")  ? "/"
                       : is_op("%")  ? "%"
                                     : nullptr;
      if (!op) return e;
      ++pos_;
      e = binary(op, std::move(e), power());
    }
  }
  ExprPtr power() {
    ExprPtr e = unary();
    while (accept_op("**")) e = binary("**", std::move(e), unary());
    return e;
  }
  ExprPtr unary() {
    if (is_op("-") || is_op("+")) {
      auto e = make(Expr::Kind::Unary);
      e->name = peek().text;
      ++pos_;
      e->items.push_back(unary());
      return filters(std::move(e));
    }
    return filters(postfix(primary()));
  }
  void call_args(Expr& e) {  // after '('
    while (!accept_op(")")) {
      if (peek().kind == Token::Name && is_op("=", 1)) {
        std::string key = expect_name();
        expect_op("=");
        e.kwargs.emplace_back(key, expression());
      } else {
        e.items.push_back(expression());
      }
      if (!is_op(")")) expect_op(",");
    }
  }
  ExprPtr postfix(ExprPtr e) {
    for (;;) {
      if (accept_op(".")) {
        auto a = make(Expr::Kind::Attr);
        if (peek().kind == Token::Int) {  // x.0 == x[0]
          a->kind = Expr::Kind::Index;
          a->items.push_back(std::move(e));
          auto lit = make(Expr::Kind::Literal);
          lit->value = std::stoll(t_[pos_++].text);
          a->items.push_back(std::move(lit));
        } else {
          a->name = expect_name();
          a->items.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (accept_op("[")) {
        ExprPtr first = is_op(":") ? nullptr : expression();
        if (accept_op(":")) {
          auto s = make(Expr::Kind::Slice);
          s->items.push_back(std::move(e));
          s->items.push_back(std::move(first));
          s->items.push_back(is_op(":") || is_op("]") ? nullptr : expression());
          s->items.push_back(accept_op(":") && !is_op("]") ? expression() : nullptr);
          expect_op("]");
          e = std::move(s);
        } else {
          expect_op("]");
          auto i = make(Expr::Kind::Index);
          i->items.push_back(std::move(e));
          i->items.push_back(std::move(first));
          e = std::move(i);
        }
      } else if (accept_op("(")) {
        auto c = make(Expr::Kind::Call);
        c->items.push_back(std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprPtr filters(ExprPtr e) {
    while (accept_op("|")) {
      auto f = make(Expr::Kind::Filter);
      f->name = expect_name();
      f->items.push_back(std::move(e));
      if (accept_op("(")) call_args(*f);
      e = std::move(f);
    }
    return e;
  }
  ExprPtr primary() {
    const Token tok = peek();
    if (tok.kind == Token::End) fail("expected an expression");
    ++pos_;
    auto lit = make(Expr::Kind::Literal);
    switch (tok.kind) {
      case Token::String: {
        std::string s = tok.text;
        while (peek().kind == Token::String) s += t_[pos_++].text;  // adjacent literals join
        lit->value = s;
        return lit;
      }
      case Token::Int:
        lit->value = std::stoll(tok.text);
        return lit;
      case Token::Float:
        lit->value = std::stod(tok.text);
        return lit;
      case Token::Name:
        if (tok.text == "true" || tok.text == "True") {
          lit->value = true;
          return lit;
        }
        if (tok.text == "false" || tok.text == "False") {
          lit->value = false;
          return lit;
        }
        if (tok.text == "none" || tok.text == "None") {
          lit->value = nullptr;
          return lit;
        }
        lit->kind = Expr::Kind::Name;
        lit->name = tok.text;
        return lit;
      default:
        break;
    }
    if (tok.text == "(") {
      ExprPtr inner = expression();
      if (accept_op(",")) {  // a tuple: evaluated as a list
        auto list = make(Expr::Kind::List);
        list->items.push_back(std::move(inner));
        while (!is_op(")")) {
          list->items.push_back(expression());
          if (!is_op(")")) expect_op(",");
        }
        inner = std::move(list);
      }
      expect_op(")");
      return inner;
    }
    if (tok.text == "[") {
      auto list = make(Expr::Kind::List);
      while (!accept_op("]")) {
        list->items.push_back(expression());
        if (!is_op("]")) expect_op(",");
      }
      return list;
    }
    if (tok.text == "{") {
      auto dict = make(Expr::Kind::Dict);
      while (!accept_op("}")) {
        dict->items.push_back(expression());
        expect_op(":");
        dict->items.push_back(expression());
        if (!is_op("}")) expect_op(",");
      }
      return dict;
    }
    --pos_;
    fail("unexpected token");
  }

 private:
  std::vector<Token> t_;
  size_t pos_ = 0;
  int line_;
};

// ---- Statements -----------------------------------------------------------
class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Segment> segments) : s_(std::move(segments)) {}

  // Parses until a statement whose keyword is in `stops` (returned in *stop).
  Body parse_body(const std::vector<std::string>& stops, std::string* stop,
                  ExprParser** stop_parser) {
    Body body;
    while (pos_ < s_.size()) {
      const Segment& seg = s_[pos_++];
      if (seg.kind == Segment::Text) {
        auto st = std::make_unique<Stmt>();
        st->kind = Stmt::Kind::Text;
        st->text = seg.content;
        body.push_back(std::move(st));
        continue;
      }
      auto parser = std::make_unique<ExprParser>(tokenize(seg.content, seg.line), seg.line);
      if (seg.kind == Segment::Expression) {
        auto st = std::make_unique<Stmt>();
        st->kind = Stmt::Kind::Output;
        st->expr = parser->expression();
        parser->expect_end();
        body.push_back(std::move(st));
        continue;
      }
      const std::string keyword = parser->expect_name();
      if (std::find(stops.begin(), stops.end(), keyword) != stops.end()) {
        *stop = keyword;
        current_ = std::move(parser);
        *stop_parser = current_.get();
        return body;
      }
      body.push_back(statement(keyword, *parser, seg.line));
    }
    if (!stops.empty()) throw InputError("missing {% " + stops.back() + " %} at end of template");
    return body;
  }

 private:
  StmtPtr statement(const std::string& keyword, ExprParser& p, int line) {
    auto st = std::make_unique<Stmt>();
    st->line = line;
    std::string stop;
    ExprParser* sp = nullptr;
    if (keyword == "if") {
      st->kind = Stmt::Kind::If;
      st->conditions.push_back(p.expression());
      p.expect_end();
      for (;;) {
        st->branches.push_back(parse_body({"elif", "else", "endif"}, &stop, &sp));
        if (stop == "elif") {
          st->conditions.push_back(sp->expression());
          sp->expect_end();
        } else if (stop == "else") {
          sp->expect_end();
          st->branches.push_back(parse_body({"endif"}, &stop, &sp));
          break;
        } else {
          break;
        }
      }
      return st;
    }
    if (keyword == "for") {
      st->kind = Stmt::Kind::For;
      st->targets.push_back(p.expect_name());
      while (p.accept_op(",")) st->targets.push_back(p.expect_name());
      if (!p.accept_name("in")) p.fail("expected 'in'");
      st->expr = p.or_expr();
      if (p.accept_name("if")) st->filter = p.expression();
      p.accept_name("recursive");
      p.expect_end();
      st->branches.push_back(parse_body({"else", "endfor"}, &stop, &sp));
      st->branches.emplace_back();
      if (stop == "else") st->branches[1] = parse_body({"endfor"}, &stop, &sp);
      return st;
    }
    if (keyword == "set") {
      st->targets.push_back(p.expect_name());
      if (p.accept_op(".")) st->targets.push_back(p.expect_name());
      if (p.accept_op("=")) {
        st->kind = Stmt::Kind::Set;
        st->expr = p.expression();
        p.expect_end();
        return st;
      }
      p.expect_end();
      st->kind = Stmt::Kind::SetBlock;
      st->branches.push_back(parse_body({"endset"}, &stop, &sp));
      return st;
    }
    if (keyword == "macro") {
      st->kind = Stmt::Kind::Macro;
      st->targets.push_back(p.expect_name());
      p.expect_op("(");
      while (!p.accept_op(")")) {
        std::string name = p.expect_name();
        ExprPtr def = p.accept_op("=") ? p.expression() : nullptr;
        st->params.emplace_back(name, std::move(def));
        if (!p.is_op(")")) p.expect_op(",");
      }
      p.expect_end();
      st->branches.push_back(parse_body({"endmacro"}, &stop, &sp));
      return st;
    }
    if (keyword == "break" || keyword == "continue") {
      st->kind = keyword == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      p.expect_end();
      return st;
    }
    if (keyword == "generation") {  // transformers' assistant-mask marker: render the body as is
      st->kind = Stmt::Kind::If;
      auto yes = std::make_unique<Expr>();
      yes->kind = Expr::Kind::Literal;
      yes->value = true;
      st->conditions.push_back(std::move(yes));
      st->branches.push_back(parse_body({"endgeneration"}, &stop, &sp));
      return st;
    }
    throw InputError("line " + std::to_string(line) + ": unknown or misplaced statement '" +
                     keyword + "'");
  }

  std::vector<Segment> s_;
  size_t pos_ = 0;
  std::unique_ptr<ExprParser> current_;
};

}  // namespace

std::shared_ptr<const Template> parse(const std::string& source) {
  // Jinja's keep_trailing_newline=False: one final newline is dropped.
  std::string src = source;
  if (src.size() >= 2 && src.compare(src.size() - 2, 2, "\r\n") == 0)
    src.resize(src.size() - 2);
  else if (!src.empty() && src.back() == '\n')
    src.pop_back();
  TemplateParser parser(split_segments(src));
  auto t = std::make_shared<Template>();
  std::string stop;
  ExprParser* sp = nullptr;
  t->body = parser.parse_body({}, &stop, &sp);
  return t;
}

}  // namespace pagoda::jinja
