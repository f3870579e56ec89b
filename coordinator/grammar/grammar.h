// Grammar: a byte-level recursive transition network — rules whose bodies are NFAs over bytes,
// with edges that call another rule (push a return state) and final states that return (pop).
// It is what the JSON-schema and regex compilers produce and what the pushdown automaton runs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mxserve::grammar {

struct ByteEdge {
  uint8_t lo = 0, hi = 0;  // inclusive byte range
  int32_t target = 0;
};
struct CallEdge {
  int32_t rule = 0;
  int32_t ret = 0;  // the state the caller continues from once the rule's body is done
};
struct GrammarState {
  std::vector<ByteEdge> bytes;
  std::vector<int32_t> eps;
  std::vector<CallEdge> calls;
  bool final = false;  // reaching it ends the rule's body (returns to the caller)
};

// A piece of NFA under construction: enter at `in`, leave from `out` (which has no edges yet).
struct Frag {
  int32_t in = 0, out = 0;
};

class Grammar {
 public:
  // Fragment builders (Thompson construction). Each fragment may be used once.
  Frag Empty();
  Frag Range(uint8_t lo, uint8_t hi);
  Frag Ranges(const std::vector<std::pair<uint8_t, uint8_t>>& ranges);
  Frag Literal(std::string_view bytes);
  Frag Seq(std::vector<Frag> parts);
  Frag Alt(std::vector<Frag> options);  // no options: matches nothing
  Frag Star(Frag f);
  Frag Plus(Frag f);
  Frag Opt(Frag f);
  Frag Call(int32_t rule);
  // Any one well-formed UTF-8 character: every multi-byte character, and the ASCII bytes b
  // for which allow_ascii[b] is true.
  Frag Utf8Char(const bool allow_ascii[128]);

  int32_t NewRule(std::string name);  // body set later (rules may call themselves)
  void SetBody(int32_t rule, Frag body);
  void set_root(int32_t rule) { root_ = rule; }

  int32_t root() const { return root_; }
  int32_t rule_start(int32_t rule) const { return rule_start_[rule]; }
  const std::string& rule_name(int32_t rule) const { return rule_names_[rule]; }
  int num_rules() const { return static_cast<int>(rule_start_.size()); }
  const GrammarState& state(int32_t s) const { return states_[s]; }
  int num_states() const { return static_cast<int>(states_.size()); }

 private:
  int32_t NewState();
  std::vector<GrammarState> states_;
  std::vector<int32_t> rule_start_;
  std::vector<std::string> rule_names_;
  int32_t root_ = -1;
};

}  // namespace mxserve::grammar
