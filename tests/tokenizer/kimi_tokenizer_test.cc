// Kimi's tokenizer folder (tiktoken.model + tokenizer_config.json), its split pattern in PCRE2,
// and vLLM's add_special_tokens semantics for text prompts.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/regex_splitter.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace mxserve {
namespace {

std::vector<std::string> SplitWith(const RegexSplitter& sp, const std::string& s) {
  std::vector<std::string_view> v;
  sp.Split(s, &v);
  return std::vector<std::string>(v.begin(), v.end());
}

std::string Utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
  return s;
}

// Rust regex (tiktoken) reads a bare \p{Han} as Script=Han; PCRE2 10.40+ reads it as
// Script_Extensions, which also holds U+3001 (、, Script=Common) and U+3006 (〆).
TEST(KimiPattern, HanIsTheScriptPropertyAsInRustRegex) {
  auto sp = RegexSplitter::Create(kKimiPattern);
  ASSERT_TRUE(sp.ok()) << sp.status();
  using V = std::vector<std::string>;
  EXPECT_EQ(SplitWith(**sp, "你、好"), (V{"你", "、", "好"}));
  EXPECT_EQ(SplitWith(**sp, "你〆好"), (V{"你", "〆", "好"}));
  EXPECT_EQ(SplitWith(**sp, "你々好"), (V{"你々好"}));  // U+3005 is Script=Han
  EXPECT_EQ(SplitWith(**sp, "ab々c"), (V{"ab", "々", "c"}));
  EXPECT_EQ(RegexSplitter::TranslatePattern(R"([\p{Han}]+\P{Greek}\p{L}\p{sc:Han}\p{Any})"),
            R"([\p{sc:Han}]+\P{sc:Greek}\p{L}\p{sc:Han}\p{Any})");
}

// The translated intersection `[A&&[^\p{Han}]]` matches a code point exactly when A does and
// Script=Han does not, for every Unicode scalar value. Each side is asked of PCRE2 separately,
// on one text holding every scalar value twice: a class that matches c makes "cc" one piece.
TEST(KimiPattern, ClassIntersectionMatchesTheSetDifferenceOnAllCodePoints) {
  std::vector<uint32_t> cps;
  std::string text;
  for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    cps.push_back(cp);
    text += Utf8(cp) + Utf8(cp);
  }
  // Membership of each scalar value in `cls`.
  auto members = [&](const std::string& cls) {
    auto sp = RegexSplitter::Create(absl::StrCat("(?:", cls, "){2}|[\\s\\S]"));
    EXPECT_TRUE(sp.ok()) << sp.status();
    std::vector<std::string_view> pieces;
    (*sp)->Split(text, &pieces);
    std::vector<bool> in;
    for (size_t p = 0; p < pieces.size() && in.size() < cps.size(); ++p) {
      const size_t one = Utf8(cps[in.size()]).size();
      in.push_back(pieces[p].size() == 2 * one);
      if (pieces[p].size() == one) ++p;  // the second copy
    }
    EXPECT_EQ(in.size(), cps.size());
    return in;
  };
  const std::string a = R"(\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M})", b = R"(\p{Ll}\p{Lm}\p{Lo}\p{M})";
  const auto inter_a = members("[" + a + "&&[^\\p{Han}]]");
  const auto inter_b = members("[" + b + "&&[^\\p{Han}]]");
  const auto set_a = members("[" + a + "]"), set_b = members("[" + b + "]");
  const auto han = members("\\p{sc:Han}");
  int in_a = 0, in_han = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    ASSERT_EQ(inter_a[i], set_a[i] && !han[i]) << std::hex << cps[i];
    ASSERT_EQ(inter_b[i], set_b[i] && !han[i]) << std::hex << cps[i];
    in_a += inter_a[i];
    in_han += han[i];
  }
  EXPECT_EQ(cps.size(), 0x110000u - 0x800u);
  EXPECT_GT(in_a, 30000);  // not vacuous: the classes are large, and Han too
  EXPECT_GT(in_han, 80000);
}

class KimiDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(::testing::TempDir()) /
           absl::StrCat("kimi_tok_", ::testing::UnitTest::GetInstance()->random_seed(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    // 256 byte ranks, then the prefixes of "hello" (259 = "hello") and of "你好" (264).
    std::string ranks;
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
    for (const std::string w : {"hello", "你好"})
      for (size_t n = 2; n <= w.size(); ++n) tokens.push_back(w.substr(0, n));
    for (size_t r = 0; r < tokens.size(); ++r)
      absl::StrAppend(&ranks, absl::Base64Escape(tokens[r]), " ", r, "\n");
    Write("tiktoken.model", ranks);
    n_base_ = static_cast<int>(tokens.size());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void Write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string Config(const std::string& extra) {
    return absl::StrCat(R"({"added_tokens_decoder": {")", n_base_, R"(": {"content": "[BOS]", "special": true}, ")",
                        n_base_ + 2, R"(": {"content": "<|im_end|>", "special": true}, ")",
                        n_base_ + 3, R"(": {"content": "<|open|>", "special": false}}, "bos_token": "[BOS]", "eos_token": "<|im_end|>")",
                        extra, "}");
  }
  std::filesystem::path dir_;
  int n_base_ = 0;
};

TEST_F(KimiDir, LoadsRanksSpecialsAndReservedNames) {
  Write("tokenizer_config.json", Config(""));
  auto tok = Tokenizer::FromDir(dir_.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), n_base_ + 256);
  EXPECT_EQ((*tok)->bos_token_id(), n_base_);
  EXPECT_EQ((*tok)->eos_token_id(), n_base_ + 2);
  EXPECT_EQ((*tok)->SpecialTokenId(absl::StrCat("<|reserved_token_", n_base_ + 1, "|>")), n_base_ + 1);
  EXPECT_EQ((*tok)->SpecialTokenId(absl::StrCat("<|reserved_token_", n_base_ + 255, "|>")),
            n_base_ + 255);
  EXPECT_FALSE((*tok)->IsSpecial(n_base_ + 3));  // "special": false (K3's <|open|>)
  const int hello = 259, nihao = 264;
  EXPECT_EQ((*tok)->Encode("hello你好<|im_end|>", true),
            (std::vector<int32_t>{hello, nihao, n_base_ + 2}));
  EXPECT_EQ((*tok)->Encode("hello你好", false), (std::vector<int32_t>{hello, nihao}));
  auto text = (*tok)->Decode(std::vector<int32_t>{hello, n_base_ + 3}, /*skip_special=*/true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "hello<|open|>");
}

TEST_F(KimiDir, BadConfigIsAnErrorNamingTheFolderAndField) {
  Write("tokenizer_config.json", R"({"added_tokens_decoder": {"x": {"content": "[BOS]"}}})");
  auto tok = Tokenizer::FromDir(dir_.string());
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("added_tokens_decoder[\"x\"]"), std::string::npos)
      << tok.status();
  EXPECT_NE(tok.status().message().find(dir_.string()), std::string::npos);
  Write("tokenizer_config.json", R"({"bos_token": "[NOPE]"})");
  EXPECT_FALSE(Tokenizer::FromDir(dir_.string()).ok());
  Write("tokenizer_config.json", Config(R"(, "add_bos_token": "yes")"));
  EXPECT_FALSE(Tokenizer::FromDir(dir_.string()).ok());
  Write("tiktoken.model", "aGVsbG8= notanumber\n");
  EXPECT_FALSE(Tokenizer::FromDir(dir_.string()).ok());
}

// vLLM's /tokenize: special-token strings in a text prompt are recognized either way;
// add_special_tokens adds the template (here add_bos_token) and nothing else.
TEST_F(KimiDir, AddSpecialTokensAddsTheTemplateOnly) {
  Write("tokenizer_config.json", Config(R"(, "add_bos_token": true)"));
  auto tok = Tokenizer::FromDir(dir_.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int hello = 259;
  const int32_t bos = n_base_, end = n_base_ + 2;
  EXPECT_EQ((*tok)->EncodePrompt("hello<|im_end|>", false), (std::vector<int32_t>{hello, end}));
  EXPECT_EQ((*tok)->EncodePrompt("hello<|im_end|>", true), (std::vector<int32_t>{bos, hello, end}));
  Write("tokenizer_config.json", Config(""));
  tok = Tokenizer::FromDir(dir_.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->EncodePrompt("hello<|im_end|>", true), (std::vector<int32_t>{hello, end}));
}

// HF tokenizer.json: a TemplateProcessing post-processor is the template; tokenizer_config's
// add_bos_token / add_eos_token (LlamaTokenizerFast) override it.
TEST(PromptTemplate, TemplateProcessingAndAddBosEos) {
  auto files = MakeTinyTokenizer(0);  // ids 0..255 are the bytes
  ASSERT_TRUE(files.ok()) << files.status();
  nlohmann::json tj = nlohmann::json::parse(files->tokenizer_json);
  const std::string cfg = R"({"bos_token": "<|startoftext|>", "eos_token": "<|return|>")";
  auto tok = Tokenizer::FromJson(tj.dump(), cfg + "}");
  ASSERT_TRUE(tok.ok()) << tok.status();
  const int32_t bos = *(*tok)->SpecialTokenId("<|startoftext|>");
  const int32_t ret = *(*tok)->SpecialTokenId("<|return|>");
  EXPECT_EQ((*tok)->EncodePrompt("ab<|return|>", true), (std::vector<int32_t>{97, 98, ret}));
  tj["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<|startoftext|>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", "<|return|>"}, {"type_id", 0}}}}}},
      {"special_tokens", {{"<|startoftext|>", {{"id", "<|startoftext|>"}, {"ids", {bos}}}},
                          {"<|return|>", {{"id", "<|return|>"}, {"ids", {ret}}}}}}};
  tok = Tokenizer::FromJson(tj.dump(), cfg + "}");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->EncodePrompt("ab<|return|>", true), (std::vector<int32_t>{bos, 97, 98, ret, ret}));
  EXPECT_EQ((*tok)->EncodePrompt("ab<|return|>", false), (std::vector<int32_t>{97, 98, ret}));
  tok = Tokenizer::FromJson(tj.dump(), cfg + R"(, "add_eos_token": false})");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->EncodePrompt("ab", true), (std::vector<int32_t>{bos, 97, 98}));
  tj["post_processor"]["single"][0]["SpecialToken"]["id"] = "<x>";
  auto bad = Tokenizer::FromJson(tj.dump(), "");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("post_processor.single[0]"), std::string::npos) << bad.status();
}

}  // namespace
}  // namespace mxserve
