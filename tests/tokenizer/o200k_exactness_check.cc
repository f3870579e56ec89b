// o200k_harmony exactness: our tokenizer, loaded both ways gpt-oss-era models ship it (a
// tokenizer.json built by the TikTokenConverter algorithm, and straight from the tiktoken ranks
// file), must give exactly the ids OpenAI's tiktoken gives on generated strings.
// Usage: tokenizer_o200k_check RANKS_FILE CASES_JSONL WORK_DIR
// (run by tests/client/tokenizer/run_o200k_exactness.sh, which makes the cases with npm oracles).
// Also leaves in WORK_DIR, for the HF tokenizers.js cross-check: o200k_harmony/ and tiny/
// tokenizer folders, and tiny_ids.jsonl (our ids for each case under the tiny tokenizer).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/tokenizer/regex_splitter.h"
#include "coordinator/tokenizer/tiktoken_converter.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace {

using mxserve::AddedToken;
using mxserve::Tokenizer;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// o200k_harmony (tiktoken_ext/openai_public.py): 200018 is <|endofprompt|> (and, in tiktoken,
// also <|reserved_200018|>).
std::vector<std::pair<std::string, int32_t>> HarmonySpecials(bool full_range) {
  std::vector<std::pair<std::string, int32_t>> s = {
      {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999}, {"<|reserved_200000|>", 200000},
      {"<|reserved_200001|>", 200001}, {"<|return|>", 200002}, {"<|constrain|>", 200003},
      {"<|reserved_200004|>", 200004}, {"<|channel|>", 200005}, {"<|start|>", 200006},
      {"<|end|>", 200007}, {"<|message|>", 200008}, {"<|reserved_200009|>", 200009},
      {"<|reserved_200010|>", 200010}, {"<|reserved_200011|>", 200011}, {"<|call|>", 200012}};
  for (int i = 200013; i < 200018; ++i) s.push_back({"<|reserved_" + std::to_string(i) + "|>", i});
  s.push_back({"<|endofprompt|>", 200018});
  if (full_range)
    for (int i = 200018; i < 201088; ++i) s.push_back({"<|reserved_" + std::to_string(i) + "|>", i});
  return s;
}

std::string Show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s RANKS_FILE CASES_JSONL WORK_DIR\n", argv[0]);
    return 2;
  }
  const std::string ranks_path = argv[1], cases_path = argv[2], work = argv[3];

  // Path A: the ranks file, with every o200k_harmony special.
  auto t0 = std::chrono::steady_clock::now();
  auto a = Tokenizer::FromTiktoken(ranks_path, mxserve::kO200kPattern, HarmonySpecials(true),
                                   "<|startoftext|>", "<|return|>");
  if (!a.ok()) {
    std::fprintf(stderr, "FromTiktoken: %s\n", a.status().ToString().c_str());
    return 1;
  }
  // Path B: tokenizer.json as gpt-oss ships it (added tokens 199998..200018).
  auto tokens = mxserve::ParseTiktokenRanks(Slurp(ranks_path));
  if (!tokens.ok() || tokens->size() != 199998) {
    std::fprintf(stderr, "ranks: %s\n", tokens.ok() ? "expected 199998 ranks" : tokens.status().ToString().c_str());
    return 1;
  }
  std::vector<AddedToken> added;
  for (const auto& [c, id] : HarmonySpecials(false)) added.push_back({id, c, true});
  auto tj = mxserve::TikTokenConverterJson(*tokens, mxserve::kO200kPattern, added);
  if (!tj.ok()) {
    std::fprintf(stderr, "converter: %s\n", tj.status().ToString().c_str());
    return 1;
  }
  {
    // transformers' TikTokenConverter makes 446,189 merges from the o200k ranks.
    auto parsed = nlohmann::json::parse(*tj);
    size_t merges = parsed["model"]["merges"].size();
    if (merges != 446189 || parsed["model"]["vocab"].size() != 199998) {
      std::printf("FAIL: tokenizer.json has %zu merges (want 446189), %zu vocab (want 199998)\n",
                  merges, parsed["model"]["vocab"].size());
      return 1;
    }
  }
  const std::string o200k_dir = work + "/o200k_harmony";
  std::filesystem::create_directories(o200k_dir);
  std::ofstream(o200k_dir + "/tokenizer.json") << *tj;
  std::ofstream(o200k_dir + "/tokenizer_config.json")
      << R"({"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"})";
  auto b = Tokenizer::FromDir(o200k_dir);
  if (!b.ok()) {
    std::fprintf(stderr, "FromDir: %s\n", b.status().ToString().c_str());
    return 1;
  }
  double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("loaded o200k_harmony both ways in %.1f s (tokenizer.json %.1f MB); vocab %d / %d\n",
              load_s, tj->size() / 1e6, (*a)->vocab_size(), (*b)->vocab_size());

  int failures = 0;
  auto fail = [&](const std::string& what) {
    if (++failures <= 15) std::printf("MISMATCH %s\n", what.c_str());
  };

  // Test vectors on which tiktoken, js-tiktoken and @huggingface/tokenizers agree.
  struct Vec {
    const char* text;
    std::vector<int32_t> ids;
  } vectors[] = {
      {"What is 2 + 2?", {4827, 382, 220, 17, 659, 220, 17, 30}},
      {"Hello world", {13225, 2375}},
      {"<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant<|channel|>final<|message|>"
       "4<|return|>",
       {200006, 1428, 200008, 4827, 382, 220, 17, 659, 220, 17, 30, 200007, 200006, 173781, 200005,
        17196, 200008, 19, 200002}}};
  for (const auto& v : vectors) {
    for (const Tokenizer* t : {a->get(), b->get()}) {
      auto got = t->Encode(v.text, true);
      if (got != v.ids) fail(std::string("spec vector ") + v.text + ": got " + Show(got));
    }
  }
  if ((*b)->eos_token_id() != 200002 || (*b)->bos_token_id() != 199998)
    fail("bos/eos from tokenizer_config.json");

  auto tiny_files = mxserve::MakeTinyTokenizer(1000);
  if (!tiny_files.ok()) {
    std::fprintf(stderr, "tiny: %s\n", tiny_files.status().ToString().c_str());
    return 1;
  }
  std::filesystem::create_directories(work + "/tiny");
  std::ofstream(work + "/tiny/tokenizer.json") << tiny_files->tokenizer_json;
  std::ofstream(work + "/tiny/tokenizer_config.json") << tiny_files->tokenizer_config_json;
  auto tiny = Tokenizer::FromDir(work + "/tiny");
  if (!tiny.ok()) {
    std::fprintf(stderr, "tiny FromDir: %s\n", tiny.status().ToString().c_str());
    return 1;
  }
  std::ofstream tiny_ids(work + "/tiny_ids.jsonl");

  std::ifstream in(cases_path);
  std::string line;
  int n = 0, js_differs = 0, b_special_skipped = 0;
  size_t bytes = 0;
  double enc_s = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    nlohmann::json c;
    try {
      c = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      fail(std::string("cases line unreadable: ") + e.what());
      continue;
    }
    ++n;
    const std::string text = c["text"].get<std::string>();
    const auto special = c["special"].get<std::vector<int32_t>>();
    const auto ordinary = c["ordinary"].get<std::vector<int32_t>>();
    if (!c.value("js_agrees", true)) ++js_differs;
    tiny_ids << nlohmann::json((*tiny)->Encode(c["text"].get<std::string>(), true)).dump() << "\n";
    bytes += text.size();
    auto s0 = std::chrono::steady_clock::now();
    auto a_special = (*a)->Encode(text, true);
    enc_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
    const std::string where = c["kind"].get<std::string>() + " " + nlohmann::json(text).dump();
    if (a_special != special) fail("ranks file, specials allowed: " + where + "\n  want " + Show(special) + "\n  got  " + Show(a_special));
    if ((*a)->Encode(text, false) != ordinary) fail("ranks file, ordinary: " + where);
    if ((*b)->Encode(text, false) != ordinary) fail("tokenizer.json, ordinary: " + where);
    // Specials gpt-oss's tokenizer.json does not have (ids past 200018, and the second name
    // tiktoken gives 200018) are checked on the ranks path only.
    bool beyond = text.find("<|reserved_200018|>") != std::string::npos;
    for (int32_t id : special) beyond |= id > 200018;
    if (beyond) {
      ++b_special_skipped;
    } else if ((*b)->Encode(text, true) != special) {
      fail("tokenizer.json, specials allowed: " + where);
    }
    auto back = (*a)->Decode(special, false);
    std::string want_back = text;  // 200018 decodes as its first name
    for (size_t p; (p = want_back.find("<|reserved_200018|>")) != std::string::npos;)
      want_back.replace(p, 19, "<|endofprompt|>");
    if (!back.ok() || *back != want_back) fail("decode: " + where);
  }
  std::printf("%d cases (%zu bytes): %d mismatches; js-tiktoken differed from tiktoken on %d "
              "(U+0085); %d cases with reserved specials beyond 200018 checked on the ranks path "
              "only; encode %.1f MB/s\n",
              n, bytes, failures, js_differs, b_special_skipped, bytes / 1e6 / enc_s);
  if (n < 5000) {
    std::printf("FAIL: expected at least 5000 cases\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
