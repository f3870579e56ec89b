#include "coordinator/chat/xtml_arguments.h"

#include "absl/strings/str_cat.h"
#include "coordinator/chat/harmony_tools.h"

namespace mxserve {
namespace {

constexpr size_t kFail = std::string_view::npos;
// Python refuses to turn longer digit strings into an int (sys.int_info.default_max_str_digits);
// the ValueError it raises makes encoding_k3.py keep the arguments as raw text.
constexpr size_t kMaxIntDigits = 4300;

bool IsJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size() && IsJsonSpace(s[i])) ++i;
  return i;
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
// Four hex digits at i, or -1.
int Hex4(std::string_view s, size_t i) {
  if (i + 4 > s.size()) return -1;
  int v = 0;
  for (size_t k = i; k < i + 4; ++k) {
    const int h = HexValue(s[k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// A string body from i (just past the opening quote) as Python's scanstring with strict=False
// reads it: the index past the closing quote, or kFail. decoded (may be null) receives the value;
// *lone is set when a \u escape leaves a surrogate unpaired.
size_t ScanString(std::string_view s, size_t i, std::string* decoded, bool* lone) {
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') return i + 1;
    if (c != '\\') {
      if (decoded) decoded->push_back(c);
      ++i;
      continue;
    }
    if (i + 1 >= s.size()) return kFail;
    const char e = s[i + 1];
    if (e != 'u') {
      const char* from = "\"\\/bfnrt";
      const char* to = "\"\\/\b\f\n\r\t";
      const char* at = std::char_traits<char>::find(from, 8, e);
      if (at == nullptr) return kFail;
      if (decoded) decoded->push_back(to[at - from]);
      i += 2;
      continue;
    }
    int cp = Hex4(s, i + 2);
    if (cp < 0) return kFail;
    i += 6;
    if (cp >= 0xD800 && cp <= 0xDBFF && i + 1 < s.size() && s[i] == '\\' && s[i + 1] == 'u') {
      const int low = Hex4(s, i + 2);
      if (low < 0) return kFail;
      if (low >= 0xDC00 && low <= 0xDFFF) {
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        i += 6;
      }
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) *lone = true;
    if (decoded && !(cp >= 0xD800 && cp <= 0xDFFF)) AppendUtf8(static_cast<uint32_t>(cp), decoded);
  }
  return kFail;
}

// A number, constant (null, true, false, NaN, Infinity, -Infinity) at i: its end, or kFail.
size_t ScanScalar(std::string_view s, size_t i) {
  for (std::string_view word : {"null", "true", "false", "NaN", "Infinity", "-Infinity"}) {
    if (s.substr(i, word.size()) == word) return i + word.size();
  }
  size_t k = i;
  if (k < s.size() && s[k] == '-') ++k;
  if (k >= s.size() || !IsDigit(s[k])) return kFail;
  const size_t digits_from = k;
  if (s[k] == '0') {
    ++k;
  } else {
    while (k < s.size() && IsDigit(s[k])) ++k;
  }
  bool integer = true;
  if (k + 1 < s.size() && s[k] == '.' && IsDigit(s[k + 1])) {
    integer = false;
    k += 2;
    while (k < s.size() && IsDigit(s[k])) ++k;
  }
  if (k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
    size_t e = k + 1;
    if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
    if (e < s.size() && IsDigit(s[e])) {
      integer = false;
      k = e;
      while (k < s.size() && IsDigit(s[k])) ++k;
    }
  }
  if (integer && k - digits_from > kMaxIntDigits) return kFail;
  return k;
}

// One JSON value at i (no leading whitespace), checked without recursion: its end, or kFail.
// Strings inside containers are checked, not decoded.
size_t ScanValue(std::string_view s, size_t i) {
  std::vector<char> open;  // '{' or '[' of the containers entered
  bool want_key = false;
  for (;;) {
    if (i >= s.size()) return kFail;
    if (want_key) {  // "key" : (value follows)
      if (s[i] != '"') return kFail;
      bool ignored = false;
      i = ScanString(s, i + 1, nullptr, &ignored);
      if (i == kFail) return kFail;
      i = SkipSpace(s, i);
      if (i >= s.size() || s[i] != ':') return kFail;
      i = SkipSpace(s, i + 1);
      want_key = false;
      continue;
    }
    const char c = s[i];
    if (c == '{' || c == '[') {
      const char close = c == '{' ? '}' : ']';
      i = SkipSpace(s, i + 1);
      if (i < s.size() && s[i] == close) {
        ++i;  // empty: a complete value
      } else {
        open.push_back(c);
        want_key = c == '{';
        continue;
      }
    } else if (c == '"') {
      bool ignored = false;
      i = ScanString(s, i + 1, nullptr, &ignored);
    } else {
      i = ScanScalar(s, i);
    }
    if (i == kFail) return kFail;
    // A value ended: close containers or go on to the next element.
    for (;;) {
      if (open.empty()) return i;
      i = SkipSpace(s, i);
      if (i >= s.size()) return kFail;
      if (s[i] == (open.back() == '{' ? '}' : ']')) {
        open.pop_back();
        ++i;
        continue;
      }
      if (s[i] != ',') return kFail;
      i = SkipSpace(s, i + 1);
      want_key = open.back() == '{';
      break;
    }
  }
}

const char* TypeOf(char first) {
  switch (first) {
    case '"': return "string";
    case '{': return "object";
    case '[': return "array";
    case 'n': return "null";
    case 't':
    case 'f': return "boolean";
    default: return "number";
  }
}

}  // namespace

absl::StatusOr<XtmlArguments> XtmlArgumentsFromText(std::string_view s, const std::string& where) {
  XtmlArguments out;
  if (s.empty()) return out;
  auto raw = [&] {
    out.args.clear();
    out.raw_json = std::string(s);
    return out;
  };
  size_t i = SkipSpace(s, 0);
  if (i >= s.size() || s[i] != '{') return raw();
  i = SkipSpace(s, i + 1);
  if (i >= s.size()) return raw();
  if (s[i] == '}') return out;
  bool lone = false;
  for (;;) {
    XtmlArgument a;
    if (i >= s.size() || s[i] != '"') return raw();  // keys are strings
    i = ScanString(s, i + 1, &a.key, &lone);
    if (i == kFail) return raw();
    i = SkipSpace(s, i);
    if (i >= s.size() || s[i] != ':') return raw();
    i = SkipSpace(s, i + 1);
    if (i >= s.size()) return raw();
    const size_t from = i;
    a.type = TypeOf(s[i]);
    if (s[i] == '"') {
      i = ScanString(s, i + 1, &a.text, &lone);
    } else {
      i = ScanValue(s, i);
      if (i != kFail) a.text = std::string(s.substr(from, i - from));
    }
    if (i == kFail) return raw();
    out.args.push_back(std::move(a));
    i = SkipSpace(s, i);
    const char c = i < s.size() ? s[i++] : '\0';
    i = SkipSpace(s, i);
    if (c == '}') break;
    if (c != ',') return raw();
  }
  if (lone) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a \\u escape leaves an unpaired surrogate, which is not text"));
  }
  return out;
}

absl::StatusOr<XtmlArguments> XtmlArgumentsOf(const nlohmann::ordered_json& function,
                                              const std::string& where) {
  if (!function.contains("arguments") || function["arguments"].is_null()) return XtmlArguments{};
  const nlohmann::ordered_json& args = function["arguments"];
  if (args.is_string()) return XtmlArgumentsFromText(args.get_ref<const std::string&>(), where);
  if (!args.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected a JSON object or its text, got ", args.type_name()));
  }
  XtmlArguments out;
  for (auto it = args.begin(); it != args.end(); ++it) {
    const auto& v = it.value();
    const char* type = v.is_string() ? "string" : v.is_boolean() ? "boolean" : v.is_null() ? "null"
                       : v.is_number() ? "number" : v.is_object() ? "object" : "array";
    out.args.push_back({it.key(), type, v.is_string() ? v.get<std::string>() : PythonJsonDumps(v)});
  }
  return out;
}

}  // namespace mxserve
