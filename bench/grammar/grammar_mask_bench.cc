// Token-mask time per generated token for a nested JSON schema over a ~200k vocabulary: the
// o200k_base ranks file with gpt-oss's harmony specials (mask width 201088), or, with
// --generated, 200k random byte strings of similar lengths. Documents are seeded valid
// instances of the schema, tokenized (o200k) or split into random vocabulary pieces; each token
// is masked (the mask it was sampled under) and then accepted, as the engine does.
// Usage: grammar_mask_bench O200K_BASE_TIKTOKEN | --generated
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "coordinator/grammar/grammar_matcher.h"
#include "coordinator/grammar/structured_output.h"
#include "coordinator/grammar/vocab_trie.h"
#include "coordinator/tokenizer/regex_splitter.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve::grammar {
namespace {

using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

constexpr int kMaskSize = 201088;  // gpt-oss's vocabulary

const char kSchema[] = R"({
  "$defs": {
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"},
        "zip": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
      "required": ["street", "city", "zip"], "additionalProperties": false},
    "item": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"}, "price": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["new", "sale", "gift"]}}},
      "required": ["sku", "qty", "price", "tags"], "additionalProperties": false}},
  "type": "object",
  "properties": {
    "id": {"type": "integer"}, "customer": {"type": "object", "properties": {
        "name": {"type": "string"}, "vip": {"type": "boolean"},
        "address": {"$ref": "#/$defs/address"}},
      "required": ["name", "vip", "address"], "additionalProperties": false},
    "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
    "status": {"enum": ["open", "paid", "shipped"]}, "note": {"type": ["string", "null"]}},
  "required": ["id", "customer", "items", "status", "note"], "additionalProperties": false})";

std::string Word(std::mt19937_64& rng) {
  static const char* words[] = {"alpha", "Main St", "Springfield", "widget", "blue", "x-42",
                                "caf\xc3\xa9", "\xe6\x9d\xb1\xe4\xba\xac", "ok", "hello world"};
  return words[rng() % 10];
}

json Instance(std::mt19937_64& rng) {
  auto address = json{{"city", Word(rng)}, {"street", Word(rng)},
                      {"zip", rng() % 2 ? json(std::to_string(rng() % 100000)) : json(nullptr)}};
  json items = json::array();
  for (int i = 0, n = 1 + static_cast<int>(rng() % 4); i < n; ++i) {
    json tags = json::array();
    for (int t = 0, m = static_cast<int>(rng() % 3); t < m; ++t) {
      tags.push_back(std::vector<std::string>{"new", "sale", "gift"}[rng() % 3]);
    }
    items.push_back({{"price", (rng() % 10000) / 100.0}, {"qty", rng() % 20}, {"sku", Word(rng)},
                     {"tags", tags}});
  }
  return {{"customer", {{"address", address}, {"name", Word(rng)}, {"vip", rng() % 2 == 1}}},
          {"id", rng() % 1000000},
          {"items", items},
          {"note", rng() % 2 ? json(Word(rng)) : json(nullptr)},
          {"status", std::vector<std::string>{"open", "paid", "shipped"}[rng() % 3]}};
}

// Compact text with ", " and ": " separators (what the grammar allows).
std::string Text(const json& v) {
  std::string s = v.dump();
  std::string out;
  bool in_string = false, escaped = false;
  for (char c : s) {
    out += c;
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == ',' || c == ':') {
      out += ' ';
    }
  }
  return out;
}

struct Stats {
  std::vector<double> us;
  void Print(const char* what) {
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double u : us) sum += u;
    std::printf("%-34s tokens %6zu  mean %8.2f us  p50 %8.2f us  p99 %8.2f us  max %9.1f us\n",
                what, us.size(), sum / us.size(), us[us.size() / 2], us[us.size() * 99 / 100],
                us.back());
  }
};

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: grammar_mask_bench O200K_BASE_TIKTOKEN | --generated\n");
    return 2;
  }
  const bool generated = std::string(argv[1]) == "--generated";
  std::unique_ptr<Tokenizer> tok;
  std::vector<std::string> pieces;  // --generated: the vocabulary
  std::unique_ptr<VocabTrie> trie;
  const auto t0 = Clock::now();
  if (generated) {
    std::mt19937_64 rng(54);
    const std::string alphabet =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-.,:;\"'{}[]()\\/!?";
    for (int i = 0; i < 256; ++i) pieces.push_back(std::string(1, static_cast<char>(i)));
    while (pieces.size() < 200000) {
      std::string p;
      for (int k = 0, n = 2 + static_cast<int>(rng() % 8); k < n; ++k) {
        p += alphabet[rng() % alphabet.size()];
      }
      pieces.push_back(p);
    }
    trie = VocabTrie::FromTokens(pieces, kMaskSize, {200002});
  } else {
    auto loaded = Tokenizer::FromTiktoken(argv[1], kO200kPattern,
                                          {{"<|endoftext|>", 199999}, {"<|return|>", 200002},
                                           {"<|call|>", 200012}},
                                          "", "<|return|>");
    if (!loaded.ok()) {
      std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
      return 1;
    }
    tok = *std::move(loaded);
    trie = VocabTrie::Build(*tok, kMaskSize, {200002});
  }
  const double trie_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  std::printf("vocabulary: %s, trie %d nodes built in %.0f ms\n",
              generated ? "generated 200000 random strings" : "o200k_base + harmony specials",
              trie->num_nodes(), trie_ms);

  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  spec.schema = json::parse(kSchema);
  std::mt19937_64 rng(540);
  std::vector<std::vector<std::string>> docs;  // each document as its tokens' bytes
  for (int d = 0; d < 40; ++d) {
    const std::string text = Text(Instance(rng));
    std::vector<std::string> toks;
    if (tok) {
      for (int32_t id : tok->Encode(text, false)) {
        toks.push_back(*tok->DecodeBytes(std::span<const int32_t>(&id, 1), false));
      }
    } else {
      for (size_t i = 0; i < text.size();) {  // greedy longest vocabulary piece, via the map
        size_t n = std::min<size_t>(1 + rng() % 4, text.size() - i);
        toks.push_back(text.substr(i, n));
        i += n;
      }
    }
    docs.push_back(std::move(toks));
  }
  // One compiled grammar for all documents, as for requests sharing a schema: the first
  // documents fill the per-state mask cache; "cold" counts masks computed by a trie walk.
  auto g = *CompileStructuredOutput(spec);
  Stats first_doc, all, walks, hits;
  for (size_t d = 0; d < docs.size(); ++d) {
    GrammarMatcher m(g);
    for (const std::string& t : docs[d]) {
      const int cached = g->num_cached_masks();
      const auto s = Clock::now();
      auto mask = m.Mask(*trie);
      const double us = std::chrono::duration<double, std::micro>(Clock::now() - s).count();
      (d == 0 ? first_doc : all).us.push_back(us);
      (g->num_cached_masks() > cached ? walks : hits).us.push_back(us);
      if (!m.Accept(t)) {
        std::fprintf(stderr, "document %zu refused at token '%s'\n", d, t.c_str());
        return 1;
      }
    }
  }
  std::printf("schema: nested order (objects, $defs refs, arrays, enums, anyOf), %zu documents\n",
              docs.size());
  first_doc.Print("mask, document 1 (cold cache)");
  all.Print("mask, documents 2..40");
  walks.Print("all masks computed by a trie walk");
  hits.Print("all masks from the cache");
  std::printf("automaton states: %d\n", g->num_automaton_states());
  return 0;
}

}  // namespace
}  // namespace mxserve::grammar

int main(int argc, char** argv) { return mxserve::grammar::Main(argc, argv); }
