#include "coordinator/grammar/regex_compiler.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mxserve::grammar {
namespace {

constexpr int kMaxRepeat = 1000;
constexpr int kMaxStates = 1 << 20;

struct Node {
  enum Kind { kLiteral, kClass, kSeq, kAlt, kRepeat } kind = kSeq;
  std::string bytes;                   // kLiteral
  std::array<bool, 128> ascii{};       // kClass: allowed ASCII bytes
  bool multibyte = false;              // kClass: every non-ASCII character too
  std::vector<std::unique_ptr<Node>> children;
  int min = 0, max = -1;               // kRepeat; max -1 = unbounded
};
using NodePtr = std::unique_ptr<Node>;

class Parser {
 public:
  explicit Parser(std::string_view p) : p_(p) {}

  absl::StatusOr<NodePtr> ParseAll() {
    if (Peek('^')) ++i_;
    ASSIGN_OR_RETURN(NodePtr n, ParseAlt());
    if (i_ < p_.size()) return Error(p_[i_] == ')' ? "unbalanced ')'" : "unexpected character");
    return n;
  }

 private:
  bool Peek(char c) const { return i_ < p_.size() && p_[i_] == c; }
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("regex: ", what, " at offset ", i_, " of the pattern"));
  }
  absl::Status Unsupported(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("regex: ", what, " (at offset ", i_, ") is not supported"));
  }

  absl::StatusOr<NodePtr> ParseAlt() {
    auto alt = std::make_unique<Node>();
    alt->kind = Node::kAlt;
    while (true) {
      ASSIGN_OR_RETURN(NodePtr seq, ParseSeq());
      alt->children.push_back(std::move(seq));
      if (!Peek('|')) break;
      ++i_;
    }
    if (alt->children.size() == 1) return std::move(alt->children[0]);
    return alt;
  }

  absl::StatusOr<NodePtr> ParseSeq() {
    auto seq = std::make_unique<Node>();
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$') {
        if (i_ + 1 != p_.size()) return Unsupported("'$' before the end of the pattern");
        ++i_;
        break;
      }
      if (p_[i_] == '^') return Unsupported("'^' after the start of the pattern");
      ASSIGN_OR_RETURN(NodePtr atom, ParseAtom());
      ASSIGN_OR_RETURN(atom, ParseQuantifiers(std::move(atom)));
      seq->children.push_back(std::move(atom));
    }
    return seq;
  }

  absl::StatusOr<int> ParseInt() {
    int v = 0;
    const size_t start = i_;
    while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9') {
      v = v * 10 + (p_[i_++] - '0');
      if (v > kMaxRepeat) return Unsupported(absl::StrCat("a repeat count above ", kMaxRepeat));
    }
    if (i_ == start) return Error("expected a number in '{...}'");
    return v;
  }

  absl::StatusOr<NodePtr> ParseQuantifiers(NodePtr atom) {
    while (i_ < p_.size()) {
      int min = 0, max = -1;
      const char c = p_[i_];
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        min = 1;
        ++i_;
      } else if (c == '?') {
        max = 1;
        ++i_;
      } else if (c == '{') {
        ++i_;
        ASSIGN_OR_RETURN(min, ParseInt());
        max = min;
        if (Peek(',')) {
          ++i_;
          max = -1;
          if (!Peek('}')) {
            ASSIGN_OR_RETURN(max, ParseInt());
          }
        }
        if (!Peek('}')) return Error("expected '}'");
        ++i_;
        if (max >= 0 && max < min) return Error("repeat {n,m} with m < n");
      } else {
        break;
      }
      if (Peek('?') || Peek('+')) ++i_;  // lazy / possessive: the same set of whole matches
      auto rep = std::make_unique<Node>();
      rep->kind = Node::kRepeat;
      rep->min = min;
      rep->max = max;
      rep->children.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }

  static NodePtr Literal(std::string bytes) {
    auto n = std::make_unique<Node>();
    n->kind = Node::kLiteral;
    n->bytes = std::move(bytes);
    return n;
  }

  absl::StatusOr<NodePtr> ParseAtom() {
    const char c = p_[i_];
    if (c == '(') return ParseGroup();
    if (c == '[') return ParseClass();
    if (c == '*' || c == '+' || c == '?' || c == '{') return Error("nothing to repeat");
    if (c == '.') {
      ++i_;
      auto n = std::make_unique<Node>();
      n->kind = Node::kClass;
      n->ascii.fill(true);
      n->ascii['\n'] = false;
      n->multibyte = true;
      return n;
    }
    if (c == '\\') {
      auto n = std::make_unique<Node>();
      n->kind = Node::kClass;
      RETURN_IF_ERROR(ParseEscape(n.get(), /*in_class=*/false));
      return n;
    }
    // A literal character: a whole UTF-8 sequence so a quantifier applies to all of it.
    size_t len = 1;
    const auto b = static_cast<uint8_t>(c);
    if (b >= 0xF0) {
      len = 4;
    } else if (b >= 0xE0) {
      len = 3;
    } else if (b >= 0xC0) {
      len = 2;
    }
    len = std::min(len, p_.size() - i_);
    NodePtr n = Literal(std::string(p_.substr(i_, len)));
    i_ += len;
    return n;
  }

  absl::StatusOr<NodePtr> ParseGroup() {
    ++i_;  // '('
    if (Peek('?')) {
      const std::string_view rest = p_.substr(i_);
      if (rest.starts_with("?:")) {
        i_ += 2;
      } else if (rest.starts_with("?P<") || (rest.starts_with("?<") && rest.size() > 2 &&
                                             rest[2] != '=' && rest[2] != '!')) {
        const size_t close = p_.find('>', i_);
        if (close == std::string_view::npos) return Error("unterminated group name");
        i_ = close + 1;
      } else if (rest.starts_with("?=") || rest.starts_with("?!") || rest.starts_with("?<=") ||
                 rest.starts_with("?<!")) {
        return Unsupported("lookaround");
      } else {
        return Unsupported("the group construct '(?'");
      }
    }
    ASSIGN_OR_RETURN(NodePtr inner, ParseAlt());
    if (!Peek(')')) return Error("missing ')'");
    ++i_;
    return inner;
  }

  // Sets `n`'s class (or makes it a literal) from the escape at i_ ('\\').
  absl::Status ParseEscape(Node* n, bool in_class) {
    ++i_;
    if (i_ >= p_.size()) return Error("trailing '\\'");
    const char e = p_[i_++];
    auto set_range = [&](char lo, char hi) {
      for (int b = lo; b <= hi; ++b) n->ascii[b] = true;
    };
    auto negate = [&] {
      for (auto& a : n->ascii) a = !a;
      n->multibyte = true;
    };
    switch (e) {
      case 'd': case 'D':
        set_range('0', '9');
        if (e == 'D') negate();
        return absl::OkStatus();
      case 'w': case 'W':
        set_range('0', '9'), set_range('a', 'z'), set_range('A', 'Z'), n->ascii['_'] = true;
        if (e == 'W') negate();
        return absl::OkStatus();
      case 's': case 'S':
        for (char s : std::string_view(" \t\n\r\f\v")) n->ascii[static_cast<uint8_t>(s)] = true;
        if (e == 'S') negate();
        return absl::OkStatus();
      case 'n': n->ascii['\n'] = true; return absl::OkStatus();
      case 'r': n->ascii['\r'] = true; return absl::OkStatus();
      case 't': n->ascii['\t'] = true; return absl::OkStatus();
      case 'f': n->ascii['\f'] = true; return absl::OkStatus();
      case 'v': n->ascii['\v'] = true; return absl::OkStatus();
      case '0': n->ascii[0] = true; return absl::OkStatus();
      case 'x': {
        if (i_ + 2 > p_.size()) return Error("'\\x' needs two hex digits");
        int v = 0;
        for (int k = 0; k < 2; ++k) {
          const char h = p_[i_++];
          const int d = (h >= '0' && h <= '9')   ? h - '0'
                        : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                        : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                 : -1;
          if (d < 0) return Error("'\\x' needs two hex digits");
          v = v * 16 + d;
        }
        if (v >= 0x80) return Unsupported("'\\x' above 7F");
        n->ascii[v] = true;
        return absl::OkStatus();
      }
      case 'b': case 'B':
        if (!in_class) return Unsupported("word boundary '\\b'/'\\B'");
        break;
      default:
        break;
    }
    const auto u = static_cast<uint8_t>(e);
    if (u < 0x80 && !std::isalnum(u)) {
      n->ascii[u] = true;
      return absl::OkStatus();
    }
    if (e >= '1' && e <= '9') return Unsupported("backreference");
    return Unsupported(absl::StrCat("escape '\\", std::string(1, e), "'"));
  }

  absl::StatusOr<NodePtr> ParseClass() {
    ++i_;  // '['
    auto n = std::make_unique<Node>();
    n->kind = Node::kClass;
    bool negated = false;
    if (Peek('^')) {
      negated = true;
      ++i_;
    }
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || first)) {
      first = false;
      int lo;
      if (p_[i_] == '\\') {
        Node single;
        single.kind = Node::kClass;
        RETURN_IF_ERROR(ParseEscape(&single, /*in_class=*/true));
        int count = 0, which = 0;
        for (int b = 0; b < 128; ++b) {
          if (single.ascii[b]) ++count, which = b;
          n->ascii[b] = n->ascii[b] || single.ascii[b];
        }
        n->multibyte = n->multibyte || single.multibyte;
        if (count != 1 || single.multibyte) continue;  // a set (\d...) cannot start a range
        lo = which;
      } else {
        lo = static_cast<uint8_t>(p_[i_++]);
        if (lo >= 0x80) return Unsupported("a non-ASCII character in a character class");
        if (lo == '[' && Peek(':')) return Unsupported("POSIX class '[:...:]'");
        n->ascii[lo] = true;
      }
      if (Peek('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        int hi = static_cast<uint8_t>(p_[i_]);
        if (hi == '\\') {
          Node single;
          RETURN_IF_ERROR(ParseEscape(&single, /*in_class=*/true));
          hi = -1;
          for (int b = 0; b < 128; ++b) {
            if (single.ascii[b]) hi = b;
          }
        } else {
          ++i_;
        }
        if (hi < 0 || hi >= 0x80) return Unsupported("a non-ASCII character in a character class");
        if (hi < lo) return Error("character range out of order");
        for (int b = lo; b <= hi; ++b) n->ascii[b] = true;
      }
    }
    if (!Peek(']')) return Error("missing ']'");
    ++i_;
    if (negated) {
      for (auto& a : n->ascii) a = !a;
      n->multibyte = !n->multibyte;
    }
    return n;
  }

  std::string_view p_;
  size_t i_ = 0;
};

absl::StatusOr<Frag> Emit(const Node& n, Grammar* g) {
  if (g->num_states() > kMaxStates) {
    return absl::InvalidArgumentError("regex: the pattern compiles to too large an automaton");
  }
  switch (n.kind) {
    case Node::kLiteral:
      return g->Literal(n.bytes);
    case Node::kClass: {
      if (n.multibyte) return g->Utf8Char(n.ascii.data());
      std::vector<std::pair<uint8_t, uint8_t>> ranges;
      for (int b = 0; b < 128; ++b) {
        if (!n.ascii[b]) continue;
        if (!ranges.empty() && ranges.back().second + 1 == b) {
          ranges.back().second = static_cast<uint8_t>(b);
        } else {
          ranges.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(b)});
        }
      }
      return g->Ranges(ranges);
    }
    case Node::kSeq:
    case Node::kAlt: {
      std::vector<Frag> parts;
      for (const NodePtr& c : n.children) {
        ASSIGN_OR_RETURN(Frag f, Emit(*c, g));
        parts.push_back(f);
      }
      return n.kind == Node::kSeq ? g->Seq(std::move(parts)) : g->Alt(std::move(parts));
    }
    case Node::kRepeat: {
      std::vector<Frag> parts;
      for (int k = 0; k < n.min; ++k) {
        ASSIGN_OR_RETURN(Frag f, Emit(*n.children[0], g));
        parts.push_back(f);
      }
      if (n.max < 0) {
        ASSIGN_OR_RETURN(Frag f, Emit(*n.children[0], g));
        parts.push_back(g->Star(f));
      } else {
        // Nested optionals: (x(x(x)?)?)? — linear in the count, no ambiguity blow-up.
        Frag tail = g->Empty();
        for (int k = n.min; k < n.max; ++k) {
          ASSIGN_OR_RETURN(Frag f, Emit(*n.children[0], g));
          tail = g->Opt(g->Seq({f, tail}));
        }
        parts.push_back(tail);
      }
      return g->Seq(std::move(parts));
    }
  }
  return absl::InternalError("regex: unknown node");
}

}  // namespace

absl::StatusOr<int32_t> CompileRegexRule(std::string_view pattern, std::string_view name,
                                         Grammar* grammar) {
  Parser parser(pattern);
  ASSIGN_OR_RETURN(NodePtr root, parser.ParseAll());
  ASSIGN_OR_RETURN(Frag body, Emit(*root, grammar));
  const int32_t rule = grammar->NewRule(std::string(name));
  grammar->SetBody(rule, body);
  return rule;
}

}  // namespace mxserve::grammar
