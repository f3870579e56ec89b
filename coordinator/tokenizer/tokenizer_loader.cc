// Tokenizer factories: HF tokenizer.json (+ tokenizer_config.json) and tiktoken ranks files.
// nlohmann::json throws; every throw is caught here and becomes a Status naming the field.
#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/bpe_tokenizer.h"
#include "coordinator/tokenizer/byte_unicode.h"
#include "coordinator/tokenizer/tiktoken_converter.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mxserve {
namespace {

using json = nlohmann::json;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return absl::DataLossError(absl::StrCat("error reading ", path));
  return ss.str();
}

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", field, ": ", why));
}

// Adds the splitters a HF pre_tokenizer describes (Split with a regex or string pattern,
// ByteLevel, Sequence of those).
absl::Status AddPreTokenizer(const json& pt, const std::string& field, BpeTokenizerParts* parts) {
  if (pt.is_null()) return absl::OkStatus();
  if (!pt.is_object() || !pt.contains("type") || !pt["type"].is_string())
    return Bad(field, "expected an object with a string \"type\"");
  const std::string type = pt["type"].get<std::string>();
  if (type == "Sequence") {
    if (!pt.contains("pretokenizers") || !pt["pretokenizers"].is_array())
      return Bad(field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < pt["pretokenizers"].size(); ++i) {
      RETURN_IF_ERROR(AddPreTokenizer(pt["pretokenizers"][i],
                                      absl::StrCat(field, ".pretokenizers[", i, "]"), parts));
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    parts->add_prefix_space = pt.value("add_prefix_space", false);
    if (pt.value("use_regex", true)) {
      ASSIGN_OR_RETURN(auto s, RegexSplitter::Create(kGpt2Pattern));
      parts->splitters.push_back(std::move(s));
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    const std::string behavior = pt.value("behavior", std::string("Isolated"));
    if (behavior != "Isolated") return Bad(field + ".behavior", "only \"Isolated\" is supported");
    if (pt.value("invert", false)) return Bad(field + ".invert", "true is not supported");
    if (!pt.contains("pattern") || !pt["pattern"].is_object())
      return Bad(field + ".pattern", "expected {\"Regex\": ...} or {\"String\": ...}");
    const json& pat = pt["pattern"];
    std::string regex;
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      regex = pat["Regex"].get<std::string>();
    } else if (pat.contains("String") && pat["String"].is_string()) {
      regex = absl::StrCat("\\Q", pat["String"].get<std::string>(), "\\E");
    } else {
      return Bad(field + ".pattern", "expected a string \"Regex\" or \"String\"");
    }
    auto s = RegexSplitter::Create(regex);
    if (!s.ok()) return Bad(field + ".pattern", std::string(s.status().message()));
    parts->splitters.push_back(std::move(*s));
    return absl::OkStatus();
  }
  return Bad(field + ".type", absl::StrCat("pre-tokenizer \"", type, "\" is not supported"));
}

// bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}.
std::optional<std::string> TokenName(const json& cfg, const char* key) {
  if (!cfg.contains(key)) return std::nullopt;
  const json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  return std::nullopt;
}

// The add_special_tokens template from a TemplateProcessing post-processor's "single" list:
// SpecialToken entries before the Sequence are the prefix, after it the suffix.
absl::Status ReadTemplateProcessing(const json& pp, BpeTokenizerParts* parts) {
  if (!pp.is_object() || pp.value("type", std::string()) != "TemplateProcessing")
    return absl::OkStatus();
  if (!pp.contains("single") || !pp["single"].is_array())
    return Bad("post_processor.single", "expected an array");
  bool after = false;
  for (size_t i = 0; i < pp["single"].size(); ++i) {
    const json& e = pp["single"][i];
    const std::string f = absl::StrCat("post_processor.single[", i, "]");
    if (e.contains("Sequence")) {
      after = true;
      continue;
    }
    if (!e.contains("SpecialToken") || !e["SpecialToken"].is_object() ||
        !e["SpecialToken"].contains("id") || !e["SpecialToken"]["id"].is_string())
      return Bad(f, "expected {\"Sequence\": ...} or {\"SpecialToken\": {\"id\": name}}");
    const std::string name = e["SpecialToken"]["id"].get<std::string>();
    if (!pp.contains("special_tokens") || !pp["special_tokens"].contains(name) ||
        !pp["special_tokens"][name].contains("ids") || !pp["special_tokens"][name]["ids"].is_array())
      return Bad(f, absl::StrCat("special token \"", name, "\" has no ids in special_tokens"));
    for (const json& id : pp["special_tokens"][name]["ids"]) {
      if (!id.is_number_integer()) return Bad(f, "a special token id is not an integer");
      (after ? parts->prompt_suffix : parts->prompt_prefix).push_back(id.get<int32_t>());
    }
  }
  return absl::OkStatus();
}

// tokenizer_config.json's add_bos_token / add_eos_token (LlamaTokenizerFast rebuilds its template
// from them): when present, they set the template's BOS prefix / EOS suffix.
absl::Status ApplyAddBosEos(const json& cfg, BpeTokenizerParts* parts) {
  if (!cfg.is_object()) return absl::OkStatus();
  for (const char* key : {"add_bos_token", "add_eos_token"}) {
    if (!cfg.contains(key)) continue;
    if (!cfg[key].is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tokenizer_config.json: ", key, ": expected true or false"));
    }
    const bool bos = std::string_view(key) == "add_bos_token";
    std::vector<int32_t>& dst = bos ? parts->prompt_prefix : parts->prompt_suffix;
    dst.clear();
    if (!cfg[key].get<bool>()) continue;
    const std::optional<int32_t>& id = bos ? parts->bos : parts->eos;
    if (!id) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", key,
                                                     " is true but no ", bos ? "bos" : "eos",
                                                     "_token is given"));
    }
    dst.push_back(*id);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> FromParsedJson(const json& tj, const json* cfg) {
  if (!tj.is_object()) return Bad("(root)", "expected an object");
  if (!tj.contains("model") || !tj["model"].is_object()) return Bad("model", "missing");
  const json& model = tj["model"];
  if (model.value("type", std::string()) != "BPE")
    return Bad("model.type", "only \"BPE\" (byte-level) is supported");
  if (model.value("byte_fallback", false))
    return Bad("model.byte_fallback", "true (sentencepiece-style BPE) is not supported");
  if (tj.contains("normalizer") && !tj["normalizer"].is_null()) {
    // DeepSeek-V3's tokenizer.json spells "no normalizer" as an empty Sequence.
    const json& n = tj["normalizer"];
    const bool empty_sequence = n.is_object() && n.value("type", std::string()) == "Sequence" &&
                                n.contains("normalizers") && n["normalizers"].is_array() &&
                                n["normalizers"].empty();
    if (!empty_sequence) return Bad("normalizer", "only null (or an empty Sequence) is supported");
  }
  if (tj.contains("decoder") && !tj["decoder"].is_null() &&
      tj["decoder"].value("type", std::string()) != "ByteLevel")
    return Bad("decoder.type", "only \"ByteLevel\" is supported");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    return Bad("model.vocab", "expected an object");

  absl::flat_hash_set<std::string> added_contents;
  if (tj.contains("added_tokens") && tj["added_tokens"].is_array()) {
    for (const json& t : tj["added_tokens"])
      if (t.is_object() && t.contains("content") && t["content"].is_string())
        added_contents.insert(t["content"].get<std::string>());
  }
  absl::flat_hash_map<std::string, int32_t> vocab;
  absl::flat_hash_map<std::string, int32_t> by_spelling;  // byte-level spelling -> id, for merges
  absl::flat_hash_map<int32_t, std::string> spelling_of;   // id -> spelling, for duplicates
  vocab.reserve(model["vocab"].size());
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer())
      return Bad(absl::StrCat("model.vocab[\"", it.key(), "\"]"), "expected an integer id");
    auto bytes = ByteLevelToBytes(it.key());
    if (!bytes.ok()) {
      // DeepSeek-V3's vocab also lists its added tokens under their own spelling: those are
      // matched as added tokens, never merged.
      if (added_contents.contains(it.key())) continue;
      return Bad("model.vocab", std::string(bytes.status().message()));
    }
    int32_t id = it.value().get<int32_t>();
    if (id < 0) return Bad(absl::StrCat("model.vocab[\"", it.key(), "\"]"), "negative id");
    if (!vocab.try_emplace(*bytes, id).second)
      return Bad(absl::StrCat("model.vocab[\"", it.key(), "\"]"), "duplicate token bytes");
    // One id, two tokens: decoding would pick one silently.
    if (auto [other, fresh] = spelling_of.try_emplace(id, it.key()); !fresh) {
      return Bad(absl::StrCat("model.vocab[\"", it.key(), "\"]"),
                 absl::StrCat("id ", id, " is also the id of \"", other->second, "\""));
    }
    by_spelling.try_emplace(it.key(), id);
  }

  std::vector<std::pair<int32_t, int32_t>> merges;
  if (model.contains("merges") && !model["merges"].is_null() && !model["merges"].is_array()) {
    return Bad("model.merges", "expected an array");  // else silently a merge-less tokenizer
  }
  if (!model.value("ignore_merges", false) && model.contains("merges") &&
      model["merges"].is_array()) {
    const json& m = model["merges"];
    merges.reserve(m.size());
    for (size_t r = 0; r < m.size(); ++r) {
      std::string a, b;
      if (m[r].is_string()) {  // "a b" (tokenizers < 0.20)
        const std::string s = m[r].get<std::string>();
        size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) return Bad(absl::StrCat("model.merges[", r, "]"), "no space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m[r].is_array() && m[r].size() == 2 && m[r][0].is_string() &&
                 m[r][1].is_string()) {
        a = m[r][0].get<std::string>();
        b = m[r][1].get<std::string>();
      } else {
        return Bad(absl::StrCat("model.merges[", r, "]"), "expected \"a b\" or [a, b]");
      }
      auto ia = by_spelling.find(a), ib = by_spelling.find(b);
      if (ia == by_spelling.end() || ib == by_spelling.end()) {
        return Bad(absl::StrCat("model.merges[", r, "]"),
                   absl::StrCat("\"", ia == by_spelling.end() ? a : b, "\" is not in the vocab"));
      }
      merges.push_back({ia->second, ib->second});
    }
  }

  BpeTokenizerParts parts;
  {
    auto bpe = BytePairEncoder::Create(std::move(vocab), merges);
    if (!bpe.ok()) return Bad("model", std::string(bpe.status().message()));
    parts.bpe = std::move(*bpe);
  }
  if (tj.contains("pre_tokenizer"))
    RETURN_IF_ERROR(AddPreTokenizer(tj["pre_tokenizer"], "pre_tokenizer", &parts));

  if (tj.contains("added_tokens") && !tj["added_tokens"].is_null()) {
    const json& at = tj["added_tokens"];
    if (!at.is_array()) return Bad("added_tokens", "expected an array");
    for (size_t i = 0; i < at.size(); ++i) {
      const std::string f = absl::StrCat("added_tokens[", i, "]");
      if (!at[i].is_object() || !at[i].contains("id") || !at[i]["id"].is_number_integer() ||
          !at[i].contains("content") || !at[i]["content"].is_string())
        return Bad(f, "expected {\"id\": int, \"content\": string, ...}");
      parts.added.push_back(AddedToken{at[i]["id"].get<int32_t>(),
                                       at[i]["content"].get<std::string>(),
                                       at[i].value("special", false)});
    }
  }

  auto lookup = [&](const std::string& name) -> std::optional<int32_t> {
    for (const AddedToken& t : parts.added)
      if (t.content == name) return t.id;
    auto it = parts.bpe.vocab().find(name);
    if (it != parts.bpe.vocab().end()) return it->second;
    return std::nullopt;
  };
  if (cfg != nullptr && cfg->is_object()) {
    for (const char* key : {"bos_token", "eos_token"}) {
      auto name = TokenName(*cfg, key);
      if (!name) continue;
      auto id = lookup(*name);
      if (!id) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tokenizer_config.json: ", key, " \"", *name, "\" is not a token of tokenizer.json"));
      }
      (std::string(key) == "bos_token" ? parts.bos : parts.eos) = id;
    }
  }
  if (tj.contains("post_processor"))
    RETURN_IF_ERROR(ReadTemplateProcessing(tj["post_processor"], &parts));
  if (cfg != nullptr) RETURN_IF_ERROR(ApplyAddBosEos(*cfg, &parts));
  ASSIGN_OR_RETURN(auto tok, BpeTokenizer::Create(std::move(parts)));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> FromKimiDir(const std::string& dir);

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(const std::string& tokenizer_json,
                                                               const std::string& config_json) {
  try {
    json tj = json::parse(tokenizer_json);
    json cfg;
    if (!config_json.empty()) cfg = json::parse(config_json);
    return FromParsedJson(tj, config_json.empty() ? nullptr : &cfg);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDir(const std::string& model_dir) {
  if (!std::ifstream(model_dir + "/tokenizer.json") &&
      std::ifstream(model_dir + "/tiktoken.model")) {
    auto tok = FromKimiDir(model_dir);
    if (!tok.ok()) {
      return absl::Status(tok.status().code(),
                          absl::StrCat(model_dir, ": ", tok.status().message()));
    }
    return tok;
  }
  ASSIGN_OR_RETURN(std::string tj, ReadFile(model_dir + "/tokenizer.json"));
  std::string cfg;
  if (std::ifstream(model_dir + "/tokenizer_config.json")) {
    ASSIGN_OR_RETURN(cfg, ReadFile(model_dir + "/tokenizer_config.json"));
  }
  auto tok = FromJson(tj, cfg);
  if (!tok.ok()) {
    return absl::Status(tok.status().code(),
                        absl::StrCat(model_dir, ": ", tok.status().message()));
  }
  return tok;
}

namespace {

// A tiktoken ranks file with its pattern and added tokens (ids past the ranks); rank-BPE.
absl::StatusOr<BpeTokenizerParts> TiktokenParts(std::string_view ranks, const std::string& pattern,
                                                const std::vector<AddedToken>& added,
                                                const std::string& bos_token,
                                                const std::string& eos_token) {
  absl::flat_hash_map<std::string, int32_t> vocab;
  absl::flat_hash_map<int32_t, size_t> line_of_rank;  // a rank is one token: its id
  RETURN_IF_ERROR(ForEachTiktokenRank(
      ranks, [&](size_t line_no, std::string bytes, int32_t rank) -> absl::Status {
        if (auto [it, fresh] = line_of_rank.try_emplace(rank, line_no); !fresh) {
          return absl::InvalidArgumentError(absl::StrCat("tiktoken ranks line ", line_no, ": rank ",
                                                         rank, " is already line ", it->second, "'s"));
        }
        if (!vocab.try_emplace(std::move(bytes), rank).second) {
          return absl::InvalidArgumentError(
              absl::StrCat("tiktoken ranks line ", line_no, ": duplicate token"));
        }
        return absl::OkStatus();
      }));
  BpeTokenizerParts parts;
  {
    auto bpe = BytePairEncoder::Create(std::move(vocab), {});
    if (!bpe.ok()) return bpe.status();
    parts.bpe = std::move(*bpe);
  }
  ASSIGN_OR_RETURN(auto splitter, RegexSplitter::Create(pattern));
  parts.splitters.push_back(std::move(splitter));
  for (const AddedToken& t : added) {
    // A special on a rank's id would decode that token as itself (a silently wrong text).
    if (auto it = line_of_rank.find(t.id); it != line_of_rank.end()) {
      return absl::InvalidArgumentError(absl::StrCat("special token ", t.content, " has id ", t.id,
                                                     ", the rank of tiktoken ranks line ", it->second));
    }
    parts.added.push_back(t);
  }
  for (const auto& [name, dst] : {std::pair{bos_token, &parts.bos}, {eos_token, &parts.eos}}) {
    if (name.empty()) continue;
    for (const AddedToken& t : added)
      if (t.content == name) *dst = t.id;
    if (!*dst)
      return absl::InvalidArgumentError(absl::StrCat("special token ", name, " is not given"));
  }
  return parts;
}

// Kimi's tokenizer folder (tokenization_kimi.py): tiktoken.model's ranks, then 256 reserved
// special ids named from tokenizer_config.json's added_tokens_decoder, else
// <|reserved_token_ID|>.
absl::StatusOr<std::unique_ptr<Tokenizer>> FromKimiDir(const std::string& dir) {
  constexpr int kReservedSpecials = 256;
  ASSIGN_OR_RETURN(std::string ranks, ReadFile(dir + "/tiktoken.model"));
  json cfg = json::object();
  if (std::ifstream(dir + "/tokenizer_config.json")) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/tokenizer_config.json"));
    try {
      cfg = json::parse(text);
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("tokenizer_config.json: ", e.what()));
    }
    if (!cfg.is_object()) return absl::InvalidArgumentError("tokenizer_config.json: not an object");
  }
  int32_t n_base = 0;
  RETURN_IF_ERROR(ForEachTiktokenRank(ranks, [&](size_t, std::string, int32_t rank) {
    n_base = std::max(n_base, rank + 1);
    return absl::OkStatus();
  }));
  absl::flat_hash_map<int32_t, AddedToken> by_id;
  for (int32_t id = n_base; id < n_base + kReservedSpecials; ++id)
    by_id[id] = AddedToken{id, absl::StrCat("<|reserved_token_", id, "|>"), true};
  if (cfg.contains("added_tokens_decoder")) {
    const json& d = cfg["added_tokens_decoder"];
    if (!d.is_object())
      return absl::InvalidArgumentError("tokenizer_config.json: added_tokens_decoder: not an object");
    for (auto it = d.begin(); it != d.end(); ++it) {
      const std::string f = absl::StrCat("tokenizer_config.json: added_tokens_decoder[\"", it.key(),
                                         "\"]");
      int32_t id = 0;
      if (!absl::SimpleAtoi(it.key(), &id) || id < 0)
        return absl::InvalidArgumentError(f + ": the key is not a token id");
      if (!it.value().is_object() || !it.value().contains("content") ||
          !it.value()["content"].is_string())
        return absl::InvalidArgumentError(f + ": expected {\"content\": string, ...}");
      by_id[id] = AddedToken{id, it.value()["content"].get<std::string>(),
                             it.value().value("special", true)};
    }
  }
  std::vector<AddedToken> added;
  for (auto& [id, t] : by_id) added.push_back(std::move(t));
  std::sort(added.begin(), added.end(),
            [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  const std::string bos = TokenName(cfg, "bos_token").value_or("");
  const std::string eos = TokenName(cfg, "eos_token").value_or("");
  ASSIGN_OR_RETURN(BpeTokenizerParts parts, TiktokenParts(ranks, kKimiPattern, added, bos, eos));
  RETURN_IF_ERROR(ApplyAddBosEos(cfg, &parts));
  ASSIGN_OR_RETURN(auto tok, BpeTokenizer::Create(std::move(parts)));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromTiktokenData(
    std::string_view ranks, const std::string& pattern,
    const std::vector<std::pair<std::string, int32_t>>& specials, const std::string& bos_token,
    const std::string& eos_token) {
  std::vector<AddedToken> added;
  for (const auto& [content, id] : specials) added.push_back({id, content, true});
  ASSIGN_OR_RETURN(BpeTokenizerParts parts,
                   TiktokenParts(ranks, pattern, added, bos_token, eos_token));
  ASSIGN_OR_RETURN(auto tok, BpeTokenizer::Create(std::move(parts)));
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromTiktoken(
    const std::string& ranks_path, const std::string& pattern,
    const std::vector<std::pair<std::string, int32_t>>& specials, const std::string& bos_token,
    const std::string& eos_token) {
  ASSIGN_OR_RETURN(std::string data, ReadFile(ranks_path));
  auto tok = FromTiktokenData(data, pattern, specials, bos_token, eos_token);
  if (!tok.ok())
    return absl::Status(tok.status().code(), absl::StrCat(ranks_path, ": ", tok.status().message()));
  return tok;
}

}  // namespace mxserve
