#include "coordinator/tokenizer/regex_splitter.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mxserve {

const char kO200kPattern[] =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    "|"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    "|"
    R"(\p{N}{1,3})"
    "|"
    R"( ?[^\s\p{L}\p{N}]+[\r\n/]*)"
    "|"
    R"(\s*[\r\n]+)"
    "|"
    R"(\s+(?!\S))"
    "|"
    R"(\s+)";

const char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const char kKimiPattern[] =
    R"([\p{Han}]+)"
    "|"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    "|"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    "|"
    R"(\p{N}{1,3})"
    "|"
    R"( ?[^\s\p{L}\p{N}]+[\r\n]*)"
    "|"
    R"(\s*[\r\n]+)"
    "|"
    R"(\s+(?!\S))"
    "|"
    R"(\s+)";

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

RegexSplitter::~RegexSplitter() { delete impl_; }

namespace {

// Rust regex's class intersection (Kimi's pattern: `[\p{L}...&&[^\p{Han}]]`) has no PCRE2
// syntax: `[A&&[^B]]` becomes `(?:(?![B])[A])` and `[A&&[B]]` becomes `(?:(?=[B])[A])`.
std::string RewriteClassIntersections(const std::string& p) {
  std::string out;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == '\\' && i + 1 < p.size()) {
      out.append(p, i, 2);
      ++i;
      continue;
    }
    if (p[i] != '[') {
      out.push_back(p[i]);
      continue;
    }
    // Find the end of this class, tracking nested classes and escapes.
    size_t j = i + 1;
    int depth = 1;
    bool has_and = false;
    while (j < p.size() && depth > 0) {
      if (p[j] == '\\') {
        j += 2;
        continue;
      }
      if (p[j] == '[') ++depth;
      if (p[j] == ']') --depth;
      if (depth == 1 && p.compare(j, 2, "&&") == 0) has_and = true;
      if (depth > 0) ++j;
    }
    if (!has_and || j >= p.size() || p[i + 1] == '^') {
      out.push_back(p[i]);  // an ordinary class: copy on, character by character
      continue;
    }
    // Split the inside at top-level "&&".
    std::vector<std::string> parts(1);
    int d = 0;
    for (size_t k = i + 1; k < j; ++k) {
      if (p[k] == '\\' && k + 1 < j) {
        parts.back().append(p, k, 2);
        ++k;
        continue;
      }
      if (p[k] == '[') ++d;
      if (p[k] == ']') --d;
      if (d == 0 && p.compare(k, 2, "&&") == 0) {
        parts.emplace_back();
        ++k;
        continue;
      }
      parts.back().push_back(p[k]);
    }
    out += "(?:";
    for (size_t k = 1; k < parts.size(); ++k) {
      const std::string& q = parts[k];
      if (q.rfind("[^", 0) == 0 && q.back() == ']') {
        out += "(?![" + q.substr(2, q.size() - 3) + "])";
      } else if (q.rfind("[", 0) == 0 && q.back() == ']') {
        out += "(?=" + q + ")";
      } else {
        out += "(?=[" + q + "])";
      }
    }
    out += "[" + parts[0] + "])";
    i = j;  // past the closing ']'
  }
  return out;
}

// True for a bare Unicode script name (`Han`, `Old_Italic`), false for a general category
// (`L`, `Lu`, `L&`), `Any` or a qualified name (`sc:Han`, `Script=Han`).
bool IsBareScriptName(std::string_view name) {
  if (name.size() <= 2 || name == "Any" || name.front() == '^') return false;
  for (char c : name)
    if (!(std::isalpha(static_cast<unsigned char>(c)) || c == '_')) return false;
  return std::isupper(static_cast<unsigned char>(name.front())) != 0;
}

}  // namespace

// Rust regex and Oniguruma count U+0085 (NEL) as \s; PCRE2's \s (UCP) does not. A bare script
// name is the Script property there (`\p{Han}` excludes U+3001, Script=Common) but
// Script_Extensions in PCRE2 >= 10.40, so it is pinned to `\p{sc:NAME}`.
std::string RegexSplitter::TranslatePattern(const std::string& pattern) {
  const std::string p = RewriteClassIntersections(pattern);
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char n = p[++i];
      if (n == 's') {
        out += in_class ? R"(\s\x{85})" : R"([\s\x{85}])";
      } else if (n == 'S' && !in_class) {
        out += R"([^\s\x{85}])";
      } else if ((n == 'p' || n == 'P') && i + 1 < p.size() && p[i + 1] == '{' &&
                 p.find('}', i) != std::string::npos &&
                 IsBareScriptName(std::string_view(p).substr(i + 2, p.find('}', i) - i - 2))) {
        const size_t close = p.find('}', i);
        absl::StrAppend(&out, "\\", std::string(1, n), "{sc:", p.substr(i + 2, close - i - 2),
                        "}");
        i = close;
      } else {
        out.push_back('\\');
        out.push_back(n);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);  // literal ']' first
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:posix:]
      size_t e = p.find(":]", i + 2);
      if (e != std::string::npos) {
        out.append(p, i, e + 2 - i);
        i = e + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<RegexSplitter>> RegexSplitter::Create(const std::string& pattern) {
  std::string pcre = TranslatePattern(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pcre.data()), pcre.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off,
                                   nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    return absl::InvalidArgumentError(absl::StrCat("pre-tokenizer regex does not compile at offset ",
                                                   off, ": ", reinterpret_cast<char*>(msg),
                                                   " (pattern: ", pattern, ")"));
  }
  std::unique_ptr<RegexSplitter> s(new RegexSplitter());
  s->impl_ = new Impl();
  s->impl_->code = code;
  s->impl_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return s;
}

namespace {
// Length of the UTF-8 character starting at text[i] if it is valid, else 1 (an invalid byte).
size_t CharLen(std::string_view t, size_t i) {
  unsigned char c = static_cast<unsigned char>(t[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + n > t.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(t[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}
}  // namespace

void RegexSplitter::Split(std::string_view text, std::vector<std::string_view>* out) const {
  if (text.empty()) return;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  pcre2_match_context* mc = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* js = nullptr;
  if (impl_->jit) {
    js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (js) pcre2_jit_stack_assign(mc, nullptr, js);
  }
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  size_t gap_start = 0;  // start of text not yet emitted
  while (pos < text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, 0, md, mc);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // Resource limits (JIT stack, match limit) on pathological input: retry without JIT, and
      // failing that give this one character its own piece rather than fail the request.
      rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_JIT, md, mc);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        size_t n = CharLen(text, pos);
        if (pos > gap_start) out->push_back(text.substr(gap_start, pos - gap_start));
        out->push_back(text.substr(pos, n));
        pos += n;
        gap_start = pos;
        continue;
      }
      if (rc == PCRE2_ERROR_NOMATCH) break;
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t s = ov[0], e = ov[1];
    if (e <= s) {  // empty match: step over one character, leaving it to the gap
      pos = (s < text.size() ? s + CharLen(text, s) : s + 1);
      continue;
    }
    if (s > gap_start) out->push_back(text.substr(gap_start, s - gap_start));
    out->push_back(text.substr(s, e - s));
    pos = e;
    gap_start = e;
  }
  if (gap_start < text.size()) out->push_back(text.substr(gap_start));
  if (js) pcre2_jit_stack_free(js);
  pcre2_match_context_free(mc);
  pcre2_match_data_free(md);
}

}  // namespace mxserve
