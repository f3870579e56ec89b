#include "core/flags_util.h"

#include <algorithm>
#include <charconv>

#include <string>

#include "absl/strings/str_cat.h"

namespace mxserve {
namespace {

// Debian's abseil 20220623 has its own absl::string_view (not std::string_view), so this file
// keeps to std:: string handling.
std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ParseId(std::string_view s, int& out) {
  s = Trim(s);
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

}  // namespace

absl::StatusOr<std::vector<int>> ParseIdList(std::string_view spec, int limit) {
  auto bad = [&](std::string_view part, std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("id list '", std::string(spec), "': '", std::string(part), "' ", std::string(why)));
  };
  if (Trim(spec).empty()) {
    return absl::InvalidArgumentError("id list is empty");
  }
  std::vector<int> ids;
  for (size_t start = 0; start <= spec.size();) {
    size_t comma = spec.find(',', start);
    if (comma == std::string_view::npos) comma = spec.size();
    const std::string_view part = spec.substr(start, comma - start);
    start = comma + 1;
    const std::string_view p = Trim(part);
    if (p.empty()) return bad(part, "is empty");
    const size_t dash = p.find('-');
    int lo, hi;
    if (dash == std::string_view::npos) {
      if (!ParseId(p, lo)) return bad(p, "is not a non-negative integer");
      hi = lo;
    } else {
      if (!ParseId(p.substr(0, dash), lo) || !ParseId(p.substr(dash + 1), hi)) {
        return bad(p, "is not a range A-B of non-negative integers");
      }
      if (hi < lo) return bad(p, "is a range whose end is below its start");
    }
    if (hi >= limit) return bad(p, absl::StrCat("has an id >= ", limit, " (ids must be below ", limit, ")"));
    for (int i = lo; i <= hi; ++i) ids.push_back(i);
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> out(argv, argv + argc);
  for (int i = 1; i < argc; ++i) {
    std::string& a = out[i];
    if (a == "--") break;  // everything after is positional
    if (a.rfind("--", 0) != 0 || a.size() <= 2) continue;
    const size_t end = std::min(a.find('='), a.size());
    std::replace(a.begin() + 2, a.begin() + end, '-', '_');
  }
  return out;
}

std::vector<char*> FlagArgv(std::vector<std::string>& normalized) {
  std::vector<char*> out;
  for (auto& s : normalized) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace mxserve
