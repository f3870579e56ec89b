// Tokenizer tests: byte map, UTF-8 repair, regex splitting, rank-BPE against a slow obvious twin,
// special tokens, invalid input, long input, incremental detokenizing, loaders, and the tiny
// tokenizer's determinism and tokenizer.json shape.
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "coordinator/tokenizer/bpe_tokenizer.h"
#include "coordinator/tokenizer/byte_unicode.h"
#include "coordinator/tokenizer/regex_splitter.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "coordinator/tokenizer/utf8.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace mxserve {
namespace {

using json = nlohmann::json;

// ---- slow, obvious twins -------------------------------------------------------------------

// GPT-2's bytes_to_unicode, written out as the Python reference does.
std::map<char32_t, uint8_t> SlowUnicodeToByte() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<int> cs = bs;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(256 + n++);
    }
  }
  std::map<char32_t, uint8_t> m;
  for (size_t i = 0; i < bs.size(); ++i) m[static_cast<char32_t>(cs[i])] = static_cast<uint8_t>(bs[i]);
  return m;
}

std::u32string SlowDecodeUtf8(const std::string& s) {  // input known valid
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += n;
  }
  return out;
}

// Valid UTF-8 by the definition: decode every candidate and re-encode it canonically.
bool SlowIsValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = s[i];
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int k = 1; k < n; ++k) {
      unsigned char d = s[i + k];
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    std::string re;
    AppendUtf8(cp, &re);
    if (re != s.substr(i, n)) return false;  // overlong
    i += n;
  }
  return true;
}

// tiktoken's algorithm at its most literal: whole piece if ranked, else merge the lowest-ranked
// adjacent pair (leftmost on ties) until none is ranked.
std::vector<int32_t> NaiveRankBpe(const std::map<std::string, int32_t>& ranks,
                                  const std::string& piece) {
  if (auto it = ranks.find(piece); it != ranks.end()) return {it->second};
  std::vector<std::string> parts;
  for (char c : piece) parts.push_back(std::string(1, c));
  for (;;) {
    int best = -1;
    int32_t best_rank = INT32_MAX;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best_rank) {
        best_rank = it->second;
        best = static_cast<int>(i);
      }
    }
    if (best < 0) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + best + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) ids.push_back(ranks.at(p));
  return ids;
}

// ---- fixtures ------------------------------------------------------------------------------

const TokenizerFiles& Tiny() {
  static const TokenizerFiles* f = [] {
    auto r = MakeTinyTokenizer(1000);
    EXPECT_TRUE(r.ok()) << r.status();
    return new TokenizerFiles(*r);
  }();
  return *f;
}

const Tokenizer& TinyTok() {
  static const Tokenizer* t = [] {
    auto r = Tokenizer::FromJson(Tiny().tokenizer_json, Tiny().tokenizer_config_json);
    EXPECT_TRUE(r.ok()) << r.status();
    return r->release();
  }();
  return *t;
}

// Raw-bytes -> id map read from tokenizer.json with the twin byte map.
std::map<std::string, int32_t> TwinRanks(const std::string& tokenizer_json) {
  auto u2b = SlowUnicodeToByte();
  std::map<std::string, int32_t> m;
  json tj = json::parse(tokenizer_json);
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it) {
    std::string bytes;
    for (char32_t cp : SlowDecodeUtf8(it.key())) bytes.push_back(static_cast<char>(u2b.at(cp)));
    m[bytes] = it.value().get<int32_t>();
  }
  return m;
}

// Random text mixing ASCII words, digits, whitespace, punctuation, CJK, emoji and marks.
std::string RandomText(std::mt19937& rng, int n_atoms) {
  static const std::vector<std::string> atoms = {
      "the", "The", " quick", "fox", "dog", "'s", "'ll", "'RE", " ", "  ", "\n", "\r\n", "\t",
      "0", "12", "345", "67890", ".", ",", "!?", "...", "(", ")", "{", "}", "=", "==", "->",
      "//", "/", "#", "\"", "'", "你好", "世界", "こんにちは", "안녕", "Привет", "é", "e\u0301",
      "😀", "👩‍💻", "👍🏽", "\u0627\u0644\u0639\u0631\u0628\u064a\u0629", "\u0928\u092e\u0938\u094d\u0924\u0947",
      "ß", "Straße", "ÅNGSTRÖM", "x²", "\u00a0", "\u3000", "\u2028", "<|", "|>", "<|end", "<|end|",
      "model", "experts", "token", "ing", "tion", "Hello", " world", "DEF", "def", "int", "_x"};
  std::string s;
  for (int i = 0; i < n_atoms; ++i) s += atoms[rng() % atoms.size()];
  return s;
}

std::string RandomBytes(std::mt19937& rng, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(rng() & 0xFF));
  return s;
}

// ---- byte map and UTF-8 --------------------------------------------------------------------

TEST(ByteUnicode, MatchesGpt2TableAndRoundTrips) {
  auto u2b = SlowUnicodeToByte();
  ASSERT_EQ(u2b.size(), 256u);
  for (const auto& [cp, b] : u2b) EXPECT_EQ(ByteToUnicode(b), cp) << int(b);
  EXPECT_EQ(BytesToByteLevel(" "), "\u0120");  // 'Ġ'
  EXPECT_EQ(BytesToByteLevel("\n"), "\u010a");  // 'Ċ'
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  auto back = ByteLevelToBytes(BytesToByteLevel(all));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, all);
  EXPECT_FALSE(ByteLevelToBytes("\u4f60").ok());  // not in the map
  EXPECT_FALSE(ByteLevelToBytes("\xff").ok());
}

TEST(Utf8, ValidityMatchesSlowTwinOnRandomBytes) {
  std::mt19937 rng(7);
  for (int t = 0; t < 20000; ++t) {
    std::string s = RandomBytes(rng, 1 + rng() % 6);
    // Bias toward plausible sequences: set high bits on some bytes.
    for (char& c : s)
      if (rng() % 3 == 0) c = static_cast<char>(0x80 | (c & 0x3F));
    EXPECT_EQ(IsValidUtf8(s), SlowIsValidUtf8(s)) << absl::CHexEscape(s);
    std::string repaired;
    EXPECT_EQ(AppendUtf8Lossy(s, &repaired, false), s.size());
    EXPECT_TRUE(SlowIsValidUtf8(repaired)) << absl::CHexEscape(s);
    if (SlowIsValidUtf8(s)) {
      EXPECT_EQ(repaired, s);
    }
  }
}

TEST(Utf8, MaximalSubpartReplacement) {
  auto fix = [](const std::string& s) {
    std::string out;
    AppendUtf8Lossy(s, &out, false);
    return out;
  };
  const std::string R = "\xEF\xBF\xBD";
  EXPECT_EQ(fix("a\xE2\x82"), "a" + R);           // truncated 3-byte: one U+FFFD
  EXPECT_EQ(fix("\xF0\x80\x80"), R + R + R);      // F0 80 is never valid: three
  EXPECT_EQ(fix("\xED\xA0\x80"), R + R + R);      // surrogate
  EXPECT_EQ(fix("\xC0\xAF"), R + R);              // overlong
  EXPECT_EQ(fix("\xE2\x82x"), R + "x");
  EXPECT_EQ(fix("\xFF\xFE"), R + R);
  std::string held;
  EXPECT_EQ(AppendUtf8Lossy("ab\xE2\x82", &held, true), 2u);
  EXPECT_EQ(held, "ab");
}

// ---- regex splitting -----------------------------------------------------------------------

std::vector<std::string> SplitO200k(const std::string& s) {
  static auto sp = RegexSplitter::Create(kO200kPattern);
  EXPECT_TRUE(sp.ok());
  std::vector<std::string_view> v;
  (*sp)->Split(s, &v);
  return {v.begin(), v.end()};
}

TEST(RegexSplitter, O200kPieces) {
  using V = std::vector<std::string>;
  EXPECT_EQ(SplitO200k("What is 2 + 2?"), (V{"What", " is", " ", "2", " +", " ", "2", "?"}));
  EXPECT_EQ(SplitO200k("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(SplitO200k("I'm HERE's 12345"), (V{"I'm", " HERE's", " ", "123", "45"}));
  EXPECT_EQ(SplitO200k("a  \n\n b"), (V{"a", "  \n\n", " b"}));
  EXPECT_EQ(SplitO200k("x   y"), (V{"x", "  ", " y"}));
  EXPECT_EQ(SplitO200k("path/to/x\n"), (V{"path", "/to", "/x", "\n"}));
  // U+0085 counts as whitespace, as in Rust's regex (tiktoken) and Oniguruma (HF).
  EXPECT_EQ(SplitO200k("a\xC2\x85\xC2\x85"), (V{"a", "\xC2\x85\xC2\x85"}));
}

TEST(RegexSplitter, PiecesCoverAnyBytes) {
  std::mt19937 rng(11);
  for (int t = 0; t < 2000; ++t) {
    std::string s = t % 2 ? RandomBytes(rng, rng() % 40) : RandomText(rng, rng() % 30);
    auto pieces = SplitO200k(s);
    std::string joined;
    for (const auto& p : pieces) {
      EXPECT_FALSE(p.empty());
      joined += p;
    }
    EXPECT_EQ(joined, s) << absl::CHexEscape(s);
  }
}

TEST(RegexSplitter, TranslatesWhitespaceClasses) {
  EXPECT_EQ(RegexSplitter::TranslatePattern(R"(\s+(?!\S)|[^\s\p{L}])"),
            R"([\s\x{85}]+(?![^\s\x{85}])|[^\s\x{85}\p{L}])");
  EXPECT_FALSE(RegexSplitter::Create("(unclosed").ok());
  EXPECT_EQ(RegexSplitter::TranslatePattern(R"([\p{L}\p{M}&&[^\p{Han}]]+x[a&&[b]])"),
            R"((?:(?![\p{sc:Han}])[\p{L}\p{M}])+x(?:(?=[b])[a]))");
}

TEST(RegexSplitter, KimiPatternSeparatesHanFromOtherLetters) {
  auto sp = RegexSplitter::Create(kKimiPattern);
  ASSERT_TRUE(sp.ok()) << sp.status();
  auto split = [&](const std::string& s) {
    std::vector<std::string_view> v;
    (*sp)->Split(s, &v);
    return std::vector<std::string>(v.begin(), v.end());
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(split("你好世界hello World's 123456"),
            (V{"你好世界", "hello", " World's", " ", "123", "456"}));
  EXPECT_EQ(split("Straße中文a中b"), (V{"Straße", "中文", "a", "中", "b"}));
  EXPECT_EQ(split("こんにちは世界"), (V{"こんにちは", "世界"}));
}

// ---- BPE -----------------------------------------------------------------------------------

TEST(Bpe, RankBpeMatchesNaiveTwinOnRandomText) {
  const auto ranks = TwinRanks(Tiny().tokenizer_json);
  const auto& tok = TinyTok();
  std::mt19937 rng(1234);
  for (int t = 0; t < 1500; ++t) {
    std::string s = t % 5 == 0 ? RandomBytes(rng, rng() % 50) : RandomText(rng, 1 + rng() % 40);
    std::vector<int32_t> want;
    for (const auto& p : SplitO200k(s)) {
      auto ids = NaiveRankBpe(ranks, p);
      want.insert(want.end(), ids.begin(), ids.end());
    }
    EXPECT_EQ(tok.Encode(s, false), want) << absl::CHexEscape(s);
  }
}

TEST(Bpe, HeapAndQuadraticAgreeWithTwinOnLongPieces) {
  const auto ranks = TwinRanks(Tiny().tokenizer_json);
  auto* bpe_tok = dynamic_cast<const BpeTokenizer*>(&TinyTok());
  ASSERT_NE(bpe_tok, nullptr);
  std::mt19937 rng(99);
  const std::string alphabet = "abcdeehinorsttth";
  for (int t = 0; t < 300; ++t) {
    std::string piece;
    int n = 2 + rng() % 300;
    for (int i = 0; i < n; ++i)
      piece.push_back(t % 4 == 0 ? static_cast<char>(rng() & 0xFF) : alphabet[rng() % alphabet.size()]);
    std::vector<int32_t> heap, quad;
    bpe_tok->bpe().EncodeWithHeap(piece, &heap);
    bpe_tok->bpe().EncodeQuadratic(piece, &quad);
    auto want = NaiveRankBpe(ranks, piece);
    // The twin emits a whole ranked piece directly; the merge loops must reach it as well.
    EXPECT_EQ(heap, quad) << piece;
    if (!ranks.count(piece)) {
      EXPECT_EQ(heap, want) << piece;
    }
  }
}

TEST(Tokenizer, RoundTripsRandomTextAndBytes) {
  const auto& tok = TinyTok();
  std::mt19937 rng(5);
  for (int t = 0; t < 2000; ++t) {
    std::string s = t % 2 ? RandomBytes(rng, rng() % 64) : RandomText(rng, rng() % 50);
    auto ids = tok.Encode(s, t % 3 == 0);
    auto bytes = tok.DecodeBytes(ids, false);
    ASSERT_TRUE(bytes.ok());
    EXPECT_EQ(*bytes, s) << absl::CHexEscape(s);
    auto text = tok.Decode(ids, false);
    ASSERT_TRUE(text.ok());
    EXPECT_TRUE(IsValidUtf8(*text));
    if (IsValidUtf8(s)) {
      EXPECT_EQ(*text, s);
    }
  }
}

TEST(Tokenizer, SpecialTokensOnlyWithAllowSpecial) {
  const auto& tok = TinyTok();
  auto start = tok.SpecialTokenId("<|start|>");
  auto message = tok.SpecialTokenId("<|message|>");
  auto end = tok.SpecialTokenId("<|end|>");
  ASSERT_TRUE(start && message && end);
  EXPECT_TRUE(tok.IsSpecial(*start));
  const std::string text = "<|start|>user<|message|>Hi <|end";
  auto with = tok.Encode(text + "|>", true);
  ASSERT_GE(with.size(), 4u);
  EXPECT_EQ(with.front(), *start);
  EXPECT_EQ(with.back(), *end);
  EXPECT_NE(std::find(with.begin(), with.end(), *message), with.end());
  auto without = tok.Encode(text + "|>", false);
  for (int32_t id : without) EXPECT_FALSE(tok.IsSpecial(id));
  EXPECT_EQ(*tok.Decode(without, false), text + "|>");
  EXPECT_EQ(*tok.Decode(with, false), text + "|>");
  EXPECT_EQ(*tok.Decode(with, true), "userHi ");
  // Look-alikes are ordinary text.
  for (int32_t id : tok.Encode("<|end| > <| end|> <|END|>", true)) EXPECT_FALSE(tok.IsSpecial(id));
  EXPECT_EQ(tok.Encode("<|end|><|end|>", true), (std::vector<int32_t>{*end, *end}));
}

TEST(Tokenizer, LongestSpecialWins) {
  // Hand-built tokenizer.json: two added tokens where one is a prefix of the other.
  json tj = json::parse(Tiny().tokenizer_json);
  int32_t next = Tiny().vocab_size;
  tj["added_tokens"].push_back({{"id", next}, {"content", "<|a"}, {"special", true}});
  tj["added_tokens"].push_back({{"id", next + 1}, {"content", "<|a|>"}, {"special", true}});
  auto tok = Tokenizer::FromJson(tj.dump(), "");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("<|a|><|a", true);
  EXPECT_EQ(ids, (std::vector<int32_t>{next + 1, next}));
  EXPECT_EQ((*tok)->vocab_size(), next + 2);
}

TEST(Tokenizer, InvalidUtf8AndLargeInputs) {
  const auto& tok = TinyTok();
  std::mt19937 rng(3);
  std::string big;
  while (big.size() < (3u << 20)) big += RandomText(rng, 50) + RandomBytes(rng, 3);
  auto t0 = std::chrono::steady_clock::now();
  auto ids = tok.Encode(big, true);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0);
  EXPECT_EQ(*tok.DecodeBytes(ids, false), big);
  // One enormous word, one enormous whitespace run, one enormous run of invalid bytes.
  for (const std::string& huge :
       {std::string(1 << 20, 'a'), std::string(1 << 20, ' ') + "x", std::string(1 << 20, '\xff'),
        std::string(1 << 19, '\xe4') + "\xbd\xa0"}) {
    auto t1 = std::chrono::steady_clock::now();
    auto h = tok.Encode(huge, false);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 10.0);
    EXPECT_EQ(*tok.DecodeBytes(h, false), huge);
  }
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  const auto& tok = TinyTok();
  std::mt19937 rng(31);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(RandomText(rng, 200));
  std::vector<std::vector<int32_t>> want;
  for (const auto& t : texts) want.push_back(tok.Encode(t, true));
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int r = 0; r < 20; ++r)
        for (size_t i = k; i < texts.size(); i += 2)
          if (tok.Encode(texts[i], true) != want[i]) ++mismatches;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Tokenizer, DecodeRejectsUnknownIds) {
  const auto& tok = TinyTok();
  std::vector<int32_t> bad = {1, tok.vocab_size()};
  auto r = tok.Decode(bad, false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(std::to_string(tok.vocab_size())), std::string::npos);
  std::vector<int32_t> neg = {-1};
  EXPECT_FALSE(tok.DecodeBytes(neg, false).ok());
  EXPECT_EQ(tok.TokenString(-5), "");
}

TEST(IncrementalDetokenizer, EverySplitPointGivesValidUtf8AndTheSameText) {
  const auto& tok = TinyTok();
  std::mt19937 rng(17);
  for (int t = 0; t < 400; ++t) {
    std::string s = RandomText(rng, 1 + rng() % 20);
    if (t % 3 == 0) s += RandomBytes(rng, 1 + rng() % 4);
    std::vector<int32_t> ids;
    if (t % 2) {
      // One token per byte (ids 0..255 are the bytes): splits at every byte boundary.
      for (unsigned char c : s) ids.push_back(c);
    } else {
      ids = tok.Encode(s, true);
    }
    IncrementalDetokenizer d(&tok, false);
    std::string streamed;
    for (int32_t id : ids) {
      std::string delta = d.Push(id);
      EXPECT_TRUE(IsValidUtf8(delta)) << absl::CHexEscape(s);
      streamed += delta;
    }
    std::string tail = d.Flush();
    EXPECT_TRUE(IsValidUtf8(tail));
    streamed += tail;
    EXPECT_EQ(streamed, *tok.Decode(ids, false)) << absl::CHexEscape(s);
  }
}

TEST(IncrementalDetokenizer, HoldsBackIncompleteCharacters) {
  const auto& tok = TinyTok();
  IncrementalDetokenizer d(&tok, false);
  EXPECT_EQ(d.Push(0xE4), "");
  EXPECT_EQ(d.Push(0xBD), "");
  EXPECT_EQ(d.Push(0xA0), "\u4f60");
  EXPECT_EQ(d.Push(0xF0), "");
  EXPECT_EQ(d.Push('a'), "\xEF\xBF\xBD" "a");
  EXPECT_EQ(d.Push(0xE4), "");
  EXPECT_EQ(d.Flush(), "\xEF\xBF\xBD");
}

// ---- loaders -------------------------------------------------------------------------------

TEST(Loader, MergesModeAgreesWithRankModeForTikTokenConverterVocab) {
  json tj = json::parse(Tiny().tokenizer_json);
  tj["model"]["ignore_merges"] = false;
  auto merges_tok = Tokenizer::FromJson(tj.dump(), "");
  ASSERT_TRUE(merges_tok.ok()) << merges_tok.status();
  // Old-style "a b" merges strings load too.
  json old = tj;
  for (auto& m : old["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  auto old_tok = Tokenizer::FromJson(old.dump(), "");
  ASSERT_TRUE(old_tok.ok()) << old_tok.status();
  std::mt19937 rng(21);
  for (int t = 0; t < 800; ++t) {
    std::string s = RandomText(rng, 1 + rng() % 30);
    auto want = TinyTok().Encode(s, true);
    EXPECT_EQ((*merges_tok)->Encode(s, true), want) << s;
    EXPECT_EQ((*old_tok)->Encode(s, true), want) << s;
  }
}

// A tiktoken ranks file ("base64 rank" lines, in rank order) of the tokens of `ranks` that
// `keep` accepts.
std::string RanksFile(const std::map<std::string, int32_t>& ranks,
                      const std::function<bool(const std::string&)>& keep = nullptr) {
  std::vector<std::pair<int32_t, std::string>> by_id;
  for (const auto& [bytes, id] : ranks) {
    if (!keep || keep(bytes)) by_id.push_back({id, bytes});
  }
  std::sort(by_id.begin(), by_id.end());
  std::string file;
  for (const auto& [id, bytes] : by_id) file += absl::Base64Escape(bytes) + " " + std::to_string(id) + "\n";
  return file;
}

TEST(Loader, TiktokenRanksFileMatchesTokenizerJson) {
  const std::string ranks_file = RanksFile(TwinRanks(Tiny().tokenizer_json));
  std::vector<std::pair<std::string, int32_t>> specials;
  json tj = json::parse(Tiny().tokenizer_json);
  for (const auto& t : tj["added_tokens"]) specials.push_back({t["content"], t["id"]});
  auto tk = Tokenizer::FromTiktokenData(ranks_file, kO200kPattern, specials, "<|startoftext|>",
                                        "<|return|>");
  ASSERT_TRUE(tk.ok()) << tk.status();
  EXPECT_EQ((*tk)->eos_token_id(), Tiny().eos_token_id);
  EXPECT_EQ((*tk)->vocab_size(), Tiny().vocab_size);
  std::mt19937 rng(22);
  for (int t = 0; t < 500; ++t) {
    std::string s = RandomText(rng, 1 + rng() % 30);
    EXPECT_EQ((*tk)->Encode(s, true), TinyTok().Encode(s, true)) << s;
  }
  EXPECT_FALSE(Tokenizer::FromTiktokenData("!!notbase64 x\n", kO200kPattern, {}).ok());
  EXPECT_FALSE(Tokenizer::FromTiktoken("/nonexistent/tiktoken.model", kO200kPattern, {}).ok());
}

TEST(Loader, ChainedSplitsAndGpt2ByteLevel) {
  // DeepSeek-V3 style: several Split pre-tokenizers applied in turn, then ByteLevel.
  json tj = json::parse(Tiny().tokenizer_json);
  json& seq = tj["pre_tokenizer"]["pretokenizers"];
  seq.insert(seq.begin(), json{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}{1,3}"}}},
                               {"behavior", "Isolated"}, {"invert", false}});
  auto chained = Tokenizer::FromJson(tj.dump(), "");
  ASSERT_TRUE(chained.ok()) << chained.status();
  const auto ranks = TwinRanks(Tiny().tokenizer_json);
  std::vector<int32_t> want;
  for (const std::string p : {"x", "123", "456", "7", " y"}) {
    auto ids = NaiveRankBpe(ranks, p);
    want.insert(want.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ((*chained)->Encode("x1234567 y", false), want);
  // GPT-2 style: a lone ByteLevel pre-tokenizer with its own regex and a prefix space.
  json g = json::parse(Tiny().tokenizer_json);
  g["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  auto gpt2 = Tokenizer::FromJson(g.dump(), "");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  std::vector<int32_t> want2;
  for (const std::string p : {" Hello", " world", "'s"}) {
    auto ids = NaiveRankBpe(ranks, p);
    want2.insert(want2.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ((*gpt2)->Encode("Hello world's", false), want2);
}

// Ids given twice, merges naming a token the vocab lacks, and a merges value that is not an
// array are refused at load, naming the id or the merge (they loaded before, decoding one of
// the two tokens wrongly or silently dropping every merge).
TEST(Loader, DuplicateIdsAndUnknownMergesAreRefused) {
  json tj = json::parse(Tiny().tokenizer_json);
  tj["model"]["ignore_merges"] = false;
  ASSERT_TRUE(Tokenizer::FromJson(tj.dump(), "").ok());
  for (bool merges_mode : {false, true}) {
    json dup = tj;
    dup["model"]["ignore_merges"] = !merges_mode;
    const int32_t id_of_a = dup["model"]["vocab"]["a"].get<int32_t>();
    dup["model"]["vocab"]["zzzz-new"] = id_of_a;
    auto r = Tokenizer::FromJson(dup.dump(), "");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(absl::StrCat("id ", id_of_a, " is also the id of")),
              std::string::npos)
        << r.status();
  }
  ASSERT_FALSE(tj["model"]["merges"].empty());
  for (int side : {0, 1}) {
    json unknown = tj;
    unknown["model"]["merges"][3][side] = "no-such-token";
    auto r = Tokenizer::FromJson(unknown.dump(), "");
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("model.merges[3]"), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("\"no-such-token\" is not in the vocab"), std::string::npos)
        << r.status();
  }
  for (json bad : {json("a b"), json::object({{"a", "b"}}), json(7)}) {
    json m = tj;
    m["model"]["merges"] = bad;
    auto r = Tokenizer::FromJson(m.dump(), "");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("model.merges"), std::string::npos) << r.status();
  }
}

TEST(Loader, BadJsonIsAnErrorNamingTheField) {
  auto r1 = Tokenizer::FromJson("{not json", "");
  EXPECT_FALSE(r1.ok());
  auto r2 = Tokenizer::FromJson(R"({"model": {"type": "Unigram"}})", "");
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("model.type"), std::string::npos);
  json tj = json::parse(Tiny().tokenizer_json);
  tj["model"]["vocab"].erase("A");
  auto r3 = Tokenizer::FromJson(tj.dump(), "");
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().message().find("0x41"), std::string::npos) << r3.status();
  auto r4 = Tokenizer::FromJson(Tiny().tokenizer_json, R"({"eos_token": "<|nope|>"})");
  ASSERT_FALSE(r4.ok());
  EXPECT_NE(r4.status().message().find("eos_token"), std::string::npos);
  EXPECT_FALSE(Tokenizer::FromDir("/nonexistent-dir").ok());
  json nfc = json::parse(Tiny().tokenizer_json);
  nfc["normalizer"] = {{"type", "NFC"}};
  auto r5 = Tokenizer::FromJson(nfc.dump(), "");
  ASSERT_FALSE(r5.ok());
  EXPECT_NE(r5.status().message().find("normalizer"), std::string::npos);
  nfc["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array()}};
  EXPECT_TRUE(Tokenizer::FromJson(nfc.dump(), "").ok());
  json split_pat = json::parse(Tiny().tokenizer_json);
  split_pat["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  auto r6 = Tokenizer::FromJson(split_pat.dump(), "");
  ASSERT_FALSE(r6.ok());
  EXPECT_NE(r6.status().message().find("pre_tokenizer.pretokenizers[0].behavior"), std::string::npos);
}

// Files that would load into a tokenizer that decodes wrongly or allocates per stray id are
// refused, naming what is wrong (fuzz_tokenizer_loader's findings, docs/FUZZING.md).
TEST(Loader, TiktokenRanksWithACollidingOrHugeIdAreRefused) {
  // The 256 byte tokens only, so that an appended line is line 257.
  const std::string ranks =
      RanksFile(TwinRanks(Tiny().tokenizer_json), [](const std::string& bytes) { return bytes.size() == 1; });
  ASSERT_TRUE(Tokenizer::FromTiktokenData(ranks, kO200kPattern, {{"<|end|>", 9000}}).ok());
  // " world" given byte 0x02's rank: it would decode as that byte.
  auto dup = Tokenizer::FromTiktokenData(ranks + "IHdvcmxk 2\n", kO200kPattern, {});
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("line 257: rank 2 is already line"), std::string::npos)
      << dup.status();
  // A special on a rank's id: the rank's token would decode as the special.
  auto special = Tokenizer::FromTiktokenData(ranks + "IHdvcmxk 300\n", kO200kPattern, {{"<|end|>", 300}});
  ASSERT_FALSE(special.ok());
  EXPECT_NE(special.status().message().find("<|end|> has id 300, the rank of tiktoken ranks line 257"),
            std::string::npos)
      << special.status();
  // A stray huge id (the decode tables have an entry per id up to the largest).
  auto huge = Tokenizer::FromTiktokenData(ranks + "IHdvcmxk 2147483647\n", kO200kPattern, {});
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("2147483647 is outside"), std::string::npos) << huge.status();
  auto huge_special = Tokenizer::FromTiktokenData(ranks, kO200kPattern, {{"<|end|>", 1 << 30}});
  EXPECT_FALSE(huge_special.ok());
}

TEST(Loader, JsonVocabIdsOutsideTheTablesAreRefused) {
  for (int64_t bad : {-1LL, 1LL << 24, 2147483647LL}) {
    json tj = json::parse(Tiny().tokenizer_json);
    tj["model"]["vocab"]["Hello"] = bad;
    tj["model"]["merges"] = json::array();  // rank mode: the merges' own id check is not reached
    auto r = Tokenizer::FromJson(tj.dump(), "");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad < 0 ? "negative id" : std::to_string(bad)), std::string::npos)
        << r.status();
  }
}

// ---- tiny tokenizer ------------------------------------------------------------------------

TEST(TinyTokenizer, DeterministicAndShapedLikeTikTokenConverter) {
  auto a = MakeTinyTokenizer(300), b = MakeTinyTokenizer(300);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->tokenizer_json, b->tokenizer_json);
  EXPECT_EQ(a->tokenizer_config_json, b->tokenizer_config_json);
  json tj = json::parse(a->tokenizer_json);
  const int base = 256 + 300;
  EXPECT_EQ(tj["model"]["type"], "BPE");
  EXPECT_EQ(tj["model"]["ignore_merges"], true);
  EXPECT_EQ(tj["model"]["byte_fallback"], false);
  EXPECT_EQ(tj["model"]["fuse_unk"], false);
  EXPECT_EQ(tj["model"]["vocab"].size(), static_cast<size_t>(base));
  EXPECT_EQ(tj["model"]["vocab"]["A"], 'A');  // ids 0..255 are byte values
  EXPECT_EQ(tj["model"]["vocab"]["\u0120"], ' ');
  EXPECT_GE(tj["model"]["merges"].size(), 300u);
  EXPECT_TRUE(tj["normalizer"].is_null());
  const json& pt = tj["pre_tokenizer"];
  EXPECT_EQ(pt["type"], "Sequence");
  EXPECT_EQ(pt["pretokenizers"][0]["type"], "Split");
  EXPECT_EQ(pt["pretokenizers"][0]["pattern"]["Regex"], std::string(kO200kPattern));
  EXPECT_EQ(pt["pretokenizers"][0]["behavior"], "Isolated");
  EXPECT_EQ(pt["pretokenizers"][0]["invert"], false);
  EXPECT_EQ(pt["pretokenizers"][1]["type"], "ByteLevel");
  EXPECT_EQ(pt["pretokenizers"][1]["add_prefix_space"], false);
  EXPECT_EQ(pt["pretokenizers"][1]["use_regex"], false);
  EXPECT_EQ(tj["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(tj["post_processor"]["type"], "ByteLevel");
  EXPECT_EQ(tj["post_processor"]["trim_offsets"], false);
  // Harmony specials in o200k_harmony's relative layout (base+k == 199998+k).
  const std::map<int, std::string> named = {
      {0, "<|startoftext|>"}, {1, "<|endoftext|>"}, {4, "<|return|>"}, {5, "<|constrain|>"},
      {7, "<|channel|>"},     {8, "<|start|>"},     {9, "<|end|>"},    {10, "<|message|>"},
      {14, "<|call|>"},       {20, "<|endofprompt|>"}};
  const json& added = tj["added_tokens"];
  EXPECT_EQ(a->vocab_size % 32, 0);
  EXPECT_GE(a->vocab_size, base + 21);
  EXPECT_LT(a->vocab_size, base + 21 + 32);
  ASSERT_EQ(added.size(), static_cast<size_t>(a->vocab_size - base));
  for (size_t k = 0; k < added.size(); ++k) {
    EXPECT_EQ(added[k]["id"], base + static_cast<int>(k));
    EXPECT_EQ(added[k]["special"], true);
    EXPECT_EQ(added[k]["normalized"], false);
    auto it = named.find(static_cast<int>(k));
    EXPECT_EQ(added[k]["content"], it != named.end() ? it->second
                                                     : "<|reserved_" + std::to_string(base + k) + "|>");
  }
  EXPECT_EQ(a->eos_token_id, base + 4);
  EXPECT_EQ(a->pad_token_id, base + 1);
  json cfg = json::parse(a->tokenizer_config_json);
  EXPECT_EQ(cfg["bos_token"], "<|startoftext|>");
  EXPECT_EQ(cfg["eos_token"], "<|return|>");
  EXPECT_EQ(cfg["pad_token"], "<|endoftext|>");
  EXPECT_TRUE(cfg.contains("model_max_length"));
  // Every merge's parts and result are in the vocab (TikTokenConverter's invariant).
  for (const auto& m : tj["model"]["merges"]) {
    EXPECT_TRUE(tj["model"]["vocab"].contains(m[0].get<std::string>()));
    EXPECT_TRUE(tj["model"]["vocab"].contains(m[1].get<std::string>() ));
    EXPECT_TRUE(tj["model"]["vocab"].contains(m[0].get<std::string>() + m[1].get<std::string>()));
  }
  auto tok = Tokenizer::FromJson(a->tokenizer_json, a->tokenizer_config_json);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), a->vocab_size);
  EXPECT_EQ((*tok)->eos_token_id(), a->eos_token_id);
  EXPECT_EQ((*tok)->bos_token_id(), base);
  // Trained on English: common words are single tokens.
  EXPECT_EQ((*tok)->Encode(" the", false).size(), 1u);
  EXPECT_FALSE(MakeTinyTokenizer(-1).ok());
  EXPECT_FALSE(MakeTinyTokenizer(50000).ok());
}

}  // namespace
}  // namespace mxserve
