// Exactness against an npm oracle's ids: loads a tokenizer folder the way the daemon does
// (Tokenizer::FromDir) and compares its ids with each case of a JSONL file written by
// tests/client/tokenizer/gen_*_cases.mjs: {"text", "ids": specials recognized, no template,
// optional "ordinary": no specials recognized, optional "ids_template": with add_special_tokens,
// optional "oracle_skip": why the oracle is not the reference on this case}.
// Usage: tokenizer_ids_check MODEL_DIR CASES_JSONL        exit 0 = all match
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "coordinator/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

std::string Show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL_DIR CASES_JSONL\n", argv[0]);
    return 2;
  }
  auto tok = mxserve::Tokenizer::FromDir(argv[1]);
  if (!tok.ok()) {
    std::fprintf(stderr, "FromDir: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  std::ifstream in(argv[2]);
  std::string line;
  int cases = 0, checks = 0, failures = 0, skipped = 0;
  auto check = [&](const char* what, const std::string& text, const std::vector<int32_t>& got,
                   const std::vector<int32_t>& want) {
    ++checks;
    if (got == want) return;
    if (++failures <= 15) {
      std::printf("MISMATCH (%s) on %s\n  ours %s\n  want %s\n", what,
                  nlohmann::json(text).dump().c_str(), Show(got).c_str(), Show(want).c_str());
    }
  };
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto c = nlohmann::json::parse(line);
    const std::string text = c["text"].get<std::string>();
    if (c.contains("oracle_skip")) {  // the oracle is known to differ from the reference here
      ++skipped;
      continue;
    }
    ++cases;
    check("specials recognized", text, (*tok)->EncodePrompt(text, false),
          c["ids"].get<std::vector<int32_t>>());
    if (c.contains("ordinary"))
      check("ordinary", text, (*tok)->Encode(text, false), c["ordinary"].get<std::vector<int32_t>>());
    if (c.contains("ids_template")) {
      check("add_special_tokens", text, (*tok)->EncodePrompt(text, true),
            c["ids_template"].get<std::vector<int32_t>>());
    }
    // Decoding the ids gives the text back (every case is valid UTF-8).
    auto back = (*tok)->Decode(c["ids"].get<std::vector<int32_t>>(), false);
    ++checks;
    if (!back.ok() || *back != text) {
      if (++failures <= 15) std::printf("MISMATCH (decode) on %s\n", nlohmann::json(text).dump().c_str());
    }
  }
  std::printf("%d cases (%d more skipped: oracle differs), %d checks, %d mismatches (vocab %d)\n",
              cases, skipped, checks, failures, (*tok)->vocab_size());
  if (cases < 100) {
    std::printf("FAIL: too few cases\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
