// A strict reader for the Prometheus text exposition format 0.0.4, used to parse /metrics back
// in tests: every line must be a HELP/TYPE comment or a well-formed sample of a declared family,
// and histograms must be cumulative with le="+Inf" equal to _count.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace mxserve::testing {

struct PromSample {
  std::string name;                           // as written (with _bucket/_sum/_count)
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string type;  // counter, gauge, histogram, summary, untyped
  std::string help;
};

struct PromPage {
  std::map<std::string, PromFamily> families;
  std::vector<PromSample> samples;
  std::string error;  // empty when the page parsed and checked out

  // The value of `name` whose labels include all of `want`; nullopt if none.
  std::optional<double> Get(const std::string& name,
                            const std::map<std::string, std::string>& want = {}) const {
    for (const PromSample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : want) {
        auto it = s.labels.find(k);
        match = match && it != s.labels.end() && it->second == v;
      }
      if (match) return s.value;
    }
    return std::nullopt;
  }
  // Sum over every series of `name` whose labels include `want`.
  double Sum(const std::string& name, const std::map<std::string, std::string>& want = {}) const {
    double total = 0;
    for (const PromSample& s : samples) {
      if (s.name != name) continue;
      bool match = true;
      for (const auto& [k, v] : want) {
        auto it = s.labels.find(k);
        match = match && it != s.labels.end() && it->second == v;
      }
      if (match) total += s.value;
    }
    return total;
  }
};

inline double ParsePromValue(const std::string& v, bool* ok) {
  *ok = true;
  if (v == "+Inf") return INFINITY;
  if (v == "-Inf") return -INFINITY;
  if (v == "NaN") return NAN;
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0') *ok = false;
  return d;
}

inline PromPage ParsePrometheusText(const std::string& text) {
  PromPage page;
  static const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
  static const std::regex kLabelName("[a-zA-Z_][a-zA-Z0-9_]*");
  std::istringstream in(text);
  std::string line;
  int n = 0;
  auto fail = [&](const std::string& why) {
    if (page.error.empty()) page.error = "line " + std::to_string(n) + ": " + why + ": " + line;
  };
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream c(line);
      std::string hash, kind, name;
      c >> hash >> kind >> name;
      if (kind != "HELP" && kind != "TYPE") continue;  // other comments are allowed
      if (!std::regex_match(name, kName)) fail("bad metric name");
      std::string rest;
      std::getline(c, rest);
      if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
      if (kind == "TYPE") {
        if (rest != "counter" && rest != "gauge" && rest != "histogram" && rest != "summary" &&
            rest != "untyped")
          fail("bad type");
        if (!page.families[name].type.empty()) fail("TYPE given twice");
        page.families[name].type = rest;
      } else {
        page.families[name].help = rest;
      }
      continue;
    }
    PromSample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = line.substr(0, i);
    if (!std::regex_match(s.name, kName)) fail("bad sample name");
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t eq = line.find('=', i);
        if (eq == std::string::npos) { fail("label without ="); break; }
        std::string key = line.substr(i, eq - i);
        if (!std::regex_match(key, kLabelName)) fail("bad label name");
        i = eq + 1;
        if (i >= line.size() || line[i] != '"') { fail("unquoted label value"); break; }
        ++i;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
          ++i;
        }
        if (i >= line.size()) { fail("unterminated label value"); break; }
        ++i;  // closing quote
        s.labels[key] = value;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) { fail("unterminated labels"); continue; }
      ++i;  // '}'
    }
    if (i >= line.size() || line[i] != ' ') { fail("no value"); continue; }
    std::istringstream rest(line.substr(i + 1));
    std::string value, ts;
    rest >> value >> ts;
    bool ok = false;
    s.value = ParsePromValue(value, &ok);
    if (!ok) fail("bad value");
    // Which declared family does it belong to?
    std::string base = s.name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string suf = suffix;
      if (base.size() > suf.size() && base.compare(base.size() - suf.size(), suf.size(), suf) == 0 &&
          page.families.count(base.substr(0, base.size() - suf.size())) &&
          page.families[base.substr(0, base.size() - suf.size())].type == "histogram") {
        base = base.substr(0, base.size() - suf.size());
        break;
      }
    }
    if (!page.families.count(base) || page.families[base].type.empty()) fail("sample of an undeclared family");
    page.samples.push_back(std::move(s));
  }
  // Histograms: buckets cumulative, +Inf == _count, per label set.
  for (const auto& [name, fam] : page.families) {
    if (fam.type != "histogram") continue;
    std::map<std::string, std::vector<std::pair<double, double>>> buckets;  // series -> (le, n)
    std::map<std::string, double> counts;
    for (const PromSample& s : page.samples) {
      std::map<std::string, std::string> l = s.labels;
      std::string le = l["le"];
      l.erase("le");
      std::string key;
      for (const auto& [k, v] : l) key += k + "=" + v + ",";
      if (s.name == name + "_bucket") {
        bool ok = false;
        buckets[key].push_back({ParsePromValue(le, &ok), s.value});
        if (!ok) page.error = name + ": bad le '" + le + "'";
      } else if (s.name == name + "_count") {
        counts[key] = s.value;
      }
    }
    for (const auto& [key, b] : buckets) {
      for (size_t j = 1; j < b.size(); ++j) {
        if (!(b[j].first > b[j - 1].first) || b[j].second < b[j - 1].second)
          page.error = name + "{" + key + "}: buckets not increasing/cumulative";
      }
      if (b.empty() || !std::isinf(b.back().first) || b.back().second != counts[key])
        page.error = name + "{" + key + "}: +Inf bucket missing or != _count";
    }
  }
  return page;
}

}  // namespace mxserve::testing
