#include "coordinator/grammar/grammar.h"

#include <utility>

namespace mxserve::grammar {

int32_t Grammar::NewState() {
  states_.emplace_back();
  return static_cast<int32_t>(states_.size() - 1);
}

Frag Grammar::Empty() {
  const int32_t s = NewState();
  return {s, s};
}

Frag Grammar::Range(uint8_t lo, uint8_t hi) { return Ranges({{lo, hi}}); }

Frag Grammar::Ranges(const std::vector<std::pair<uint8_t, uint8_t>>& ranges) {
  const int32_t in = NewState();
  const int32_t out = NewState();
  for (const auto& [lo, hi] : ranges) states_[in].bytes.push_back({lo, hi, out});
  return {in, out};
}

Frag Grammar::Literal(std::string_view bytes) {
  const int32_t in = NewState();
  int32_t cur = in;
  for (char c : bytes) {
    const int32_t next = NewState();
    const auto b = static_cast<uint8_t>(c);
    states_[cur].bytes.push_back({b, b, next});
    cur = next;
  }
  return {in, cur};
}

Frag Grammar::Seq(std::vector<Frag> parts) {
  if (parts.empty()) return Empty();
  for (size_t i = 0; i + 1 < parts.size(); ++i) states_[parts[i].out].eps.push_back(parts[i + 1].in);
  return {parts.front().in, parts.back().out};
}

Frag Grammar::Alt(std::vector<Frag> options) {
  const int32_t in = NewState();
  const int32_t out = NewState();
  for (const Frag& f : options) {
    states_[in].eps.push_back(f.in);
    states_[f.out].eps.push_back(out);
  }
  return {in, out};
}

Frag Grammar::Star(Frag f) {
  const int32_t s = NewState();
  states_[s].eps.push_back(f.in);
  states_[f.out].eps.push_back(s);
  return {s, s};
}

Frag Grammar::Plus(Frag f) {
  const int32_t out = NewState();
  states_[f.out].eps.push_back(f.in);
  states_[f.out].eps.push_back(out);
  return {f.in, out};
}

Frag Grammar::Opt(Frag f) {
  // A fresh exit: f.out may have edges of its own (a Star's loop), which skipping must not reach.
  const int32_t in = NewState();
  const int32_t out = NewState();
  states_[in].eps.push_back(f.in);
  states_[in].eps.push_back(out);
  states_[f.out].eps.push_back(out);
  return {in, out};
}

Frag Grammar::Call(int32_t rule) {
  const int32_t in = NewState();
  const int32_t out = NewState();
  states_[in].calls.push_back({rule, out});
  return {in, out};
}

Frag Grammar::Utf8Char(const bool allow_ascii[128]) {
  std::vector<std::pair<uint8_t, uint8_t>> ascii;
  for (int b = 0; b < 128; ++b) {
    if (!allow_ascii[b]) continue;
    if (!ascii.empty() && ascii.back().second + 1 == b) {
      ascii.back().second = static_cast<uint8_t>(b);
    } else {
      ascii.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(b)});
    }
  }
  // The well-formed multi-byte sequences of Unicode's table 3-7 (no surrogates, no overlongs).
  auto tail = [&](int n) {
    std::vector<Frag> parts;
    for (int i = 0; i < n; ++i) parts.push_back(Range(0x80, 0xBF));
    return parts;
  };
  auto seq = [&](Frag first, std::vector<Frag> rest) {
    rest.insert(rest.begin(), first);
    return Seq(std::move(rest));
  };
  std::vector<Frag> options;
  if (!ascii.empty()) options.push_back(Ranges(ascii));
  options.push_back(seq(Range(0xC2, 0xDF), tail(1)));
  options.push_back(seq(Range(0xE0, 0xE0), {Range(0xA0, 0xBF), Range(0x80, 0xBF)}));
  options.push_back(seq(Ranges({{0xE1, 0xEC}, {0xEE, 0xEF}}), tail(2)));
  options.push_back(seq(Range(0xED, 0xED), {Range(0x80, 0x9F), Range(0x80, 0xBF)}));
  options.push_back(seq(Range(0xF0, 0xF0), {Range(0x90, 0xBF), Range(0x80, 0xBF),
                                            Range(0x80, 0xBF)}));
  options.push_back(seq(Range(0xF1, 0xF3), tail(3)));
  options.push_back(seq(Range(0xF4, 0xF4), {Range(0x80, 0x8F), Range(0x80, 0xBF),
                                            Range(0x80, 0xBF)}));
  return Alt(std::move(options));
}

int32_t Grammar::NewRule(std::string name) {
  rule_start_.push_back(-1);
  rule_names_.push_back(std::move(name));
  return static_cast<int32_t>(rule_start_.size() - 1);
}

void Grammar::SetBody(int32_t rule, Frag body) {
  rule_start_[rule] = body.in;
  states_[body.out].final = true;
}

}  // namespace mxserve::grammar
