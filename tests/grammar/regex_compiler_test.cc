// The regex compiler against a backtracking matcher (its own parser of the random patterns'
// syntax, continuation-passing search) on random patterns and strings; the refused
// constructs are named.
#include "coordinator/grammar/regex_compiler.h"

#include <random>
#include <functional>
#include <cctype>
#include <string>
#include <vector>

#include "coordinator/grammar/structured_output.h"
#include "gtest/gtest.h"
#include "tests/grammar/grammar_test_util.h"

namespace mxserve::grammar {
namespace {

std::shared_ptr<CompiledGrammar> Regex(const std::string& pattern) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kRegex;
  spec.regex = pattern;
  auto g = CompileStructuredOutput(spec);
  EXPECT_TRUE(g.ok()) << pattern << ": " << g.status();
  return g.ok() ? *g : nullptr;
}

// --- the twin: a backtracking matcher for the generator's syntax -----------------------------

struct Re {
  enum Kind { kSet, kSeq, kAlt, kRepeat } kind = kSeq;
  std::function<bool(char)> set;
  std::vector<Re> kids;
  int lo = 0, hi = -1;
};

class TwinParser {
 public:
  explicit TwinParser(const std::string& p) : p_(p) {}
  Re Alt() {
    Re alt{Re::kAlt};
    alt.kids.push_back(Seq());
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      alt.kids.push_back(Seq());
    }
    return alt;
  }

 private:
  Re Seq() {
    Re seq{Re::kSeq};
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') seq.kids.push_back(Quantified(Atom()));
    return seq;
  }
  Re Atom() {
    Re r{Re::kSet};
    const char c = p_[i_++];
    if (c == '(') {
      if (p_.compare(i_, 2, "?:") == 0) i_ += 2;
      Re inner = Alt();
      ++i_;  // ')'
      return inner;
    }
    if (c == '.') {
      r.set = [](char x) { return x != '\n'; };
    } else if (c == '\\') {
      const char e = p_[i_++];
      if (e == 'w') {
        r.set = [](char x) { return std::isalnum(static_cast<unsigned char>(x)) || x == '_'; };
      } else {
        r.set = [e](char x) { return x == e; };
      }
    } else if (c == '[') {
      const bool neg = p_[i_] == '^';
      if (neg) ++i_;
      std::string members;
      while (p_[i_] != ']') {
        if (p_[i_ + 1] == '-') {
          for (char m = p_[i_]; m <= p_[i_ + 2]; ++m) members += m;
          i_ += 3;
        } else {
          members += p_[i_++];
        }
      }
      ++i_;
      r.set = [neg, members](char x) { return (members.find(x) != std::string::npos) != neg; };
    } else {
      r.set = [c](char x) { return x == c; };
    }
    return r;
  }
  Re Quantified(Re atom) {
    while (i_ < p_.size() && std::string("*+?{").find(p_[i_]) != std::string::npos) {
      Re rep{Re::kRepeat};
      const char q = p_[i_++];
      if (q == '+') rep.lo = 1;
      if (q == '?') rep.hi = 1;
      if (q == '{') {
        rep.lo = p_[i_] - '0';
        rep.hi = p_[i_ + 2] - '0';
        i_ += 4;
      }
      rep.kids.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }
  std::string p_;
  size_t i_ = 0;
};

using Cont = std::function<bool(size_t)>;

bool Match(const Re& r, const std::string& s, size_t i, const Cont& k);

bool MatchSeq(const Re& r, size_t idx, const std::string& s, size_t i, const Cont& k) {
  if (idx == r.kids.size()) return k(i);
  return Match(r.kids[idx], s, i, [&](size_t j) { return MatchSeq(r, idx + 1, s, j, k); });
}

bool MatchRepeat(const Re& r, int count, const std::string& s, size_t i, const Cont& k) {
  if (count >= r.lo && k(i)) return true;
  if (r.hi >= 0 && count >= r.hi) return false;
  return Match(r.kids[0], s, i, [&](size_t j) {
    if (j == i && count >= r.lo) return false;  // an empty round adds nothing
    return MatchRepeat(r, count + 1, s, j, k);
  });
}

bool Match(const Re& r, const std::string& s, size_t i, const Cont& k) {
  switch (r.kind) {
    case Re::kSet: return i < s.size() && r.set(s[i]) && k(i + 1);
    case Re::kSeq: return MatchSeq(r, 0, s, i, k);
    case Re::kAlt:
      for (const Re& kid : r.kids) {
        if (Match(kid, s, i, k)) return true;
      }
      return false;
    case Re::kRepeat: return MatchRepeat(r, 0, s, i, k);
  }
  return false;
}

bool TwinMatch(const Re& r, const std::string& s) {
  return Match(r, s, 0, [&](size_t j) { return j == s.size(); });
}

// A random pattern over the alphabet "abc" using the supported operators.
std::string RandomPattern(std::mt19937_64& rng, int depth) {
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  if (depth <= 0) {
    static const char* atoms[] = {"a", "b", "c", ".", "[ab]", "[^a]", "[a-b]", "\\w", "\\."};
    return atoms[pick(9)];
  }
  switch (pick(6)) {
    case 0: return RandomPattern(rng, depth - 1) + RandomPattern(rng, depth - 1);
    case 1: return "(" + RandomPattern(rng, depth - 1) + "|" + RandomPattern(rng, depth - 1) + ")";
    case 2: return "(?:" + RandomPattern(rng, depth - 1) + ")*";
    case 3: return "(" + RandomPattern(rng, depth - 1) + ")+";
    case 4: return "(" + RandomPattern(rng, depth - 1) + ")?";
    default: {
      const int lo = pick(3), hi = lo + pick(3);
      return "(" + RandomPattern(rng, depth - 1) + "){" + std::to_string(lo) + "," +
             std::to_string(hi) + "}";
    }
  }
}

TEST(RegexCompilerTest, AgreesWithBacktrackingTwinOnRandomPatternsAndStrings) {
  std::mt19937_64 rng(54);
  for (int p = 0; p < 150; ++p) {
    const std::string pattern = RandomPattern(rng, 3);
    auto g = Regex(pattern);
    ASSERT_NE(g, nullptr);
    const Re twin = TwinParser(pattern).Alt();
    for (int s = 0; s < 40; ++s) {
      std::string str;
      const int len = std::uniform_int_distribution<int>(0, 8)(rng);
      for (int k = 0; k < len; ++k) str.push_back("abc."[std::uniform_int_distribution<int>(0, 3)(rng)]);
      EXPECT_EQ(Accepts(*g, str), TwinMatch(twin, str)) << pattern << " on '" << str << "'";
    }
    // Every random sentence of the automaton is a match.
    for (int s = 0; s < 10; ++s) {
      auto sentence = RandomSentence(*g, rng, 0.3, 24);
      if (!sentence) continue;
      bool ascii = true;
      for (char c : *sentence) ascii = ascii && static_cast<uint8_t>(c) < 0x80;
      if (ascii) EXPECT_TRUE(TwinMatch(twin, *sentence)) << pattern << " on " << *sentence;
    }
  }
}

TEST(RegexCompilerTest, CommonPatterns) {
  auto phone = Regex("^\\d{3}-\\d{4}$");
  EXPECT_TRUE(Accepts(*phone, "555-1234"));
  EXPECT_FALSE(Accepts(*phone, "555-123"));
  EXPECT_FALSE(Accepts(*phone, "5551234"));
  auto email = Regex("[a-z0-9._]+@[a-z]+\\.(com|org)");
  EXPECT_TRUE(Accepts(*email, "jo.e@example.org"));
  EXPECT_FALSE(Accepts(*email, "joe@example.net"));
  auto dot = Regex("a.c");
  EXPECT_TRUE(Accepts(*dot, "a\xc3\xa9" "c"));   // é is one character
  EXPECT_FALSE(Accepts(*dot, "a\xc3" "c"));      // half of one is not
  EXPECT_FALSE(Accepts(*dot, "a\nc"));
  auto neg = Regex("[^x]{2}");
  EXPECT_TRUE(Accepts(*neg, "\xe2\x82\xac" "y"));  // € and y
  auto lit = Regex("caf\xc3\xa9+");
  EXPECT_TRUE(Accepts(*lit, "caf\xc3\xa9\xc3\xa9"));
}

TEST(RegexCompilerTest, RefusesWhatItCannotDoByName) {
  struct Case {
    const char* pattern;
    const char* names;
  };
  for (const Case& c : {Case{"(a)\\1", "backreference"}, Case{"a(?=b)", "lookaround"},
                        Case{"\\bword", "word boundary"}, Case{"[\xc3\xa9]", "non-ASCII"},
                        Case{"(?i)abc", "(?"}, Case{"a{2000}", "repeat count"},
                        Case{"a$b", "'$'"}, Case{"[[:alpha:]]", "POSIX"}}) {
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kRegex;
    spec.regex = c.pattern;
    auto g = CompileStructuredOutput(spec);
    ASSERT_FALSE(g.ok()) << c.pattern;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(c.names), std::string::npos) << g.status();
  }
  for (const char* bad : {"(ab", "ab)", "[ab", "*a", "a{3,1}"}) {
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kRegex;
    spec.regex = bad;
    EXPECT_FALSE(CompileStructuredOutput(spec).ok()) << bad;
  }
}

TEST(RegexCompilerTest, ChoiceIsExactlyOneOfTheStrings) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kChoice;
  spec.choices = {"yes", "no", "nope"};
  auto g = CompileStructuredOutput(spec);
  ASSERT_TRUE(g.ok());
  EXPECT_TRUE(Accepts(**g, "no"));
  EXPECT_TRUE(Accepts(**g, "nope"));
  EXPECT_FALSE(Accepts(**g, "nop"));
  EXPECT_FALSE(Accepts(**g, "yesno"));
}

}  // namespace
}  // namespace mxserve::grammar
