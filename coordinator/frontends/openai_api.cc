#include "coordinator/frontends/openai_api.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/frontends/api_error.h"
#include "coordinator/frontends/prompt_limit.h"
#include "coordinator/frontends/structured_output_fields.h"
#include "core/bounded_json.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;

constexpr int kMaxTopLogprobs = 20;
// vLLM takes any number of stop strings; we only bound it so one request cannot make the stop
// matcher quadratic.
constexpr size_t kMaxStopStrings = 64;


// Every accessor treats an absent key and an explicit null alike: "not given" (OpenAI's rule).
const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::optional<double>> GetNumber(const json& obj, const char* key) {
  const json* v = Field(obj, key);
  if (!v) return std::optional<double>();
  if (!v->is_number()) return WrongType(key, "a number", *v);
  double d = v->get<double>();
  if (!std::isfinite(d)) return InvalidParam(key, absl::StrCat("'", key, "' must be finite"));
  return std::optional<double>(d);
}

absl::StatusOr<std::optional<int64_t>> GetInt(const json& obj, const char* key) {
  const json* v = Field(obj, key);
  if (!v) return std::optional<int64_t>();
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return InvalidParam(key, absl::StrCat("'", key, "' is out of range"));
    }
    return std::optional<int64_t>(v->get<int64_t>());
  }
  if (v->is_number_float()) {  // 5.0 is accepted as 5, as pydantic does in vLLM
    double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) {
      return std::optional<int64_t>(static_cast<int64_t>(d));
    }
  }
  return WrongType(key, "an integer", *v);
}

absl::StatusOr<std::optional<bool>> GetBool(const json& obj, const char* key) {
  const json* v = Field(obj, key);
  if (!v) return std::optional<bool>();
  if (!v->is_boolean()) return WrongType(key, "a boolean", *v);
  return std::optional<bool>(v->get<bool>());
}

absl::StatusOr<std::optional<std::string>> GetString(const json& obj, const char* key) {
  const json* v = Field(obj, key);
  if (!v) return std::optional<std::string>();
  if (!v->is_string()) return WrongType(key, "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

absl::StatusOr<json> ParseBody(absl::string_view body) {
  size_t bad = 0;
  if (!IsValidUtf8(body, &bad)) {
    return InvalidParam("", absl::StrCat("Request body is not valid UTF-8 (bad byte at offset ",
                                         bad, ")"),
                        "invalid_utf8");
  }
  // Bounded before anything walks it: deep nesting would overflow the stack in the chat
  // template's recursive copies and dumps, and a repeated key would be silently overwritten.
  BoundedJsonError where;
  absl::StatusOr<json> parsed = ParseBoundedJson<json>(std::string_view(body.data(), body.size()), {}, &where);
  if (!parsed.ok()) {
    switch (where.kind) {
      case BoundedJsonError::Kind::kSyntax:
        return InvalidParam("", absl::StrCat("Request body is ", parsed.status().message()),
                            "invalid_json");
      case BoundedJsonError::Kind::kTooDeep:
        return InvalidParam(where.path, absl::StrCat("Request body is ", parsed.status().message()),
                            "json_too_deep");
      case BoundedJsonError::Kind::kDuplicateKey:
        return InvalidParam(where.path, absl::StrCat("Request body has a ",
                                                     parsed.status().message()),
                            "duplicate_key");
    }
  }
  json j = *std::move(parsed);
  if (!j.is_object()) {
    return InvalidParam("", absl::StrCat("Request body must be a JSON object, got ", TypeName(j)),
                        "invalid_json");
  }
  return j;
}

absl::Status GetModel(const json& j, const ServingContext& ctx) {
  ASSIGN_OR_RETURN(auto model, GetString(j, "model"));
  return CheckModel(model.value_or(""), ctx);
}

absl::StatusOr<int> ReadN(const json& j) {
  ASSIGN_OR_RETURN(auto n, GetInt(j, "n"));
  if (!n) return 1;
  if (*n < 1 || *n > kMaxChoices) {
    return InvalidParam("n", absl::StrCat("'n' must be in [1, ", kMaxChoices, "], got ", *n));
  }
  return static_cast<int>(*n);
}

// Penalties, logit_bias, min_p, min_tokens, bad_words and the output-text switches (OpenAI's
// and vLLM's extensions); ranges are checked in ResolveSampling, for both doors.
absl::Status ReadLogitsFields(const json& j, SamplingFields* f) {
  ASSIGN_OR_RETURN(f->presence_penalty, GetNumber(j, "presence_penalty"));
  ASSIGN_OR_RETURN(f->frequency_penalty, GetNumber(j, "frequency_penalty"));
  ASSIGN_OR_RETURN(f->repetition_penalty, GetNumber(j, "repetition_penalty"));
  ASSIGN_OR_RETURN(f->min_p, GetNumber(j, "min_p"));
  ASSIGN_OR_RETURN(f->min_tokens, GetInt(j, "min_tokens"));
  ASSIGN_OR_RETURN(f->skip_special_tokens, GetBool(j, "skip_special_tokens"));
  ASSIGN_OR_RETURN(f->include_stop_str_in_output, GetBool(j, "include_stop_str_in_output"));
  if (const json* bias = Field(j, "logit_bias")) {
    if (!bias->is_object()) return WrongType("logit_bias", "an object of token id: bias", *bias);
    for (const auto& [key, value] : bias->items()) {
      const std::string p = absl::StrCat("logit_bias.", key);
      int64_t id = 0;
      if (!absl::SimpleAtoi(key, &id)) {
        return InvalidParam("logit_bias", absl::StrCat("'logit_bias' keys must be token ids, got '",
                                                       key, "'"));
      }
      if (!value.is_number()) return WrongType(p, "a number", value);
      f->logit_bias.emplace_back(id, value.get<double>());
    }
  }
  if (const json* words = Field(j, "bad_words")) {
    if (!words->is_array()) return WrongType("bad_words", "an array of strings", *words);
    for (size_t i = 0; i < words->size(); ++i) {
      if (!(*words)[i].is_string()) {
        return WrongType(absl::StrCat("bad_words[", i, "]"), "a string", (*words)[i]);
      }
      f->bad_words.push_back((*words)[i].get<std::string>());
    }
  }
  return absl::OkStatus();
}

// The sampling fields both OpenAI routes share.
absl::Status ReadCommonSampling(const json& j, SamplingFields* f) {
  ASSIGN_OR_RETURN(f->temperature, GetNumber(j, "temperature"));
  ASSIGN_OR_RETURN(f->top_p, GetNumber(j, "top_p"));
  ASSIGN_OR_RETURN(f->top_k, GetInt(j, "top_k"));
  ASSIGN_OR_RETURN(auto seed, GetInt(j, "seed"));
  if (seed) f->seed = static_cast<uint64_t>(*seed);
  if (const json* stop = Field(j, "stop")) {
    if (stop->is_string()) {
      if (!stop->get_ref<const std::string&>().empty()) f->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > kMaxStopStrings) {
        return InvalidParam("stop", absl::StrCat("'stop' may hold at most ", kMaxStopStrings,
                                                 " strings, got ", stop->size()));
      }
      for (size_t i = 0; i < stop->size(); ++i) {
        const json& s = (*stop)[i];
        if (!s.is_string()) {
          return WrongType(absl::StrCat("stop[", i, "]"), "a string", s);
        }
        if (!s.get_ref<const std::string&>().empty()) f->stop.push_back(s.get<std::string>());
      }
    } else {
      return WrongType("stop", "a string or an array of strings", *stop);
    }
  }
  if (const json* ids = Field(j, "stop_token_ids")) {  // vLLM extension
    if (!ids->is_array()) return WrongType("stop_token_ids", "an array of integers", *ids);
    for (size_t i = 0; i < ids->size(); ++i) {
      if (!(*ids)[i].is_number_integer()) {
        return WrongType(absl::StrCat("stop_token_ids[", i, "]"), "an integer", (*ids)[i]);
      }
      f->stop_token_ids.push_back((*ids)[i].get<int64_t>());
    }
  }
  ASSIGN_OR_RETURN(auto ignore_eos, GetBool(j, "ignore_eos"));  // vLLM extension
  f->ignore_eos = ignore_eos.value_or(false);
  return ReadLogitsFields(j, f);
}

absl::Status ReadStreamOptions(const json& j, bool stream, bool* include_usage) {
  *include_usage = false;
  const json* so = Field(j, "stream_options");
  if (!so) return absl::OkStatus();
  if (!so->is_object()) return WrongType("stream_options", "an object", *so);
  if (const json* iu = Field(*so, "include_usage")) {
    if (!iu->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *iu);
    *include_usage = iu->get<bool>();
  }
  if (!stream && *include_usage) {
    return InvalidParam("stream_options", "'stream_options' is only allowed when 'stream' is true");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> MessageContent(const json& msg, size_t i, const std::string& role) {
  std::string param = absl::StrCat("messages[", i, "].content");
  const json* c = Field(msg, "content");
  if (!c) {
    if (role == "assistant") return std::string();  // e.g. a turn that only called tools
    return InvalidParam(param, absl::StrCat("'", param, "' is required"));
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) return WrongType(param, "a string or an array of text parts", *c);
  std::string text;
  for (size_t k = 0; k < c->size(); ++k) {
    const json& part = (*c)[k];
    std::string pp = absl::StrCat(param, "[", k, "]");
    if (!part.is_object()) return WrongType(pp, "an object", part);
    const json* type = Field(part, "type");
    if (!type || !type->is_string()) {
      return InvalidParam(absl::StrCat(pp, ".type"), absl::StrCat("'", pp, ".type' is required"));
    }
    if (type->get<std::string>() != "text") {
      return InvalidParam(absl::StrCat(pp, ".type"),
                          absl::StrCat("content part type '", type->get<std::string>(),
                                       "' is not supported (only 'text')"),
                          "unsupported_content");
    }
    const json* t = Field(part, "text");
    if (!t || !t->is_string()) {
      return InvalidParam(absl::StrCat(pp, ".text"), absl::StrCat("'", pp, ".text' must be a string"),
                          "invalid_type");
    }
    if (!text.empty()) text += "\n";  // vLLM joins text parts with newlines
    text += t->get<std::string>();
  }
  return text;
}

absl::StatusOr<std::vector<ChatMessage>> ReadMessages(const json& j) {
  const json* m = Field(j, "messages");
  if (!m) return InvalidParam("messages", "'messages' is required");
  if (!m->is_array()) return WrongType("messages", "an array", *m);
  if (m->empty()) return InvalidParam("messages", "'messages' must not be empty");
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    std::string p = absl::StrCat("messages[", i, "]");
    if (!msg.is_object()) return WrongType(p, "an object", msg);
    const json* role = Field(msg, "role");
    if (!role) return InvalidParam(p + ".role", absl::StrCat("'", p, ".role' is required"));
    if (!role->is_string()) return WrongType(p + ".role", "a string", *role);
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      return InvalidParam(p + ".role",
                          absl::StrCat("'", p, ".role' must be one of system, developer, user, "
                                       "assistant, tool; got '", r, "'"));
    }
    ChatMessage cm;
    cm.role = r;
    ASSIGN_OR_RETURN(cm.content, MessageContent(msg, i, r));
    if (const json* name = Field(msg, "name")) {
      if (!name->is_string()) return WrongType(p + ".name", "a string", *name);
      cm.name = name->get<std::string>();
    }
    if (const json* calls = Field(msg, "tool_calls")) {
      if (r != "assistant") {
        return InvalidParam(p + ".tool_calls", "'tool_calls' is only allowed on assistant messages");
      }
      if (!calls->is_array()) return WrongType(p + ".tool_calls", "an array", *calls);
      for (size_t k = 0; k < calls->size(); ++k) {
        if (!(*calls)[k].is_object()) {
          return WrongType(absl::StrCat(p, ".tool_calls[", k, "]"), "an object", (*calls)[k]);
        }
      }
      if (!calls->empty()) cm.tool_calls_json = calls->dump();
    }
    if (const json* rc = Field(msg, "reasoning_content")) {
      if (!rc->is_string()) return WrongType(p + ".reasoning_content", "a string", *rc);
      if (r == "assistant") cm.reasoning = rc->get<std::string>();
    }
    if (const json* id = Field(msg, "tool_call_id")) {
      if (!id->is_string()) return WrongType(p + ".tool_call_id", "a string", *id);
      cm.tool_call_id = id->get<std::string>();
    }
    out.push_back(std::move(cm));
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ReadTokenArray(const json& arr, absl::string_view param) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& v = arr[i];
    if (!v.is_number_integer()) return WrongType(absl::StrCat(param, "[", i, "]"), "an integer", v);
    int64_t id = v.get<int64_t>();
    if (v.is_number_unsigned() || id < 0 || id > std::numeric_limits<int32_t>::max()) {
      if (v.is_number_unsigned() && v.get<uint64_t>() <= std::numeric_limits<int32_t>::max()) {
        ids.push_back(static_cast<int32_t>(v.get<uint64_t>()));
        continue;
      }
      return InvalidParam(absl::StrCat(param, "[", i, "]"),
                          absl::StrCat("token id ", v.dump(), " is out of range"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

absl::string_view TypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    default: return "value";
  }
}

absl::Status WrongType(absl::string_view param, absl::string_view want, const json& got) {
  return InvalidParam(param, absl::StrCat("'", param, "' must be ", want, ", got ", TypeName(got)),
                      "invalid_type");
}

bool IsValidUtf8(absl::string_view s, size_t* bad_offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  while (i < n) {
    unsigned c = p[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
    else { if (bad_offset) *bad_offset = i; return false; }
    if (i + len > n) { if (bad_offset) *bad_offset = i; return false; }
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) { if (bad_offset) *bad_offset = i; return false; }
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      if (bad_offset) *bad_offset = i;
      return false;
    }
    i += len;
  }
  return true;
}

std::string NewRequestId(absl::string_view prefix) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  id += '-';
  for (int w = 0; w < 2; ++w) {
    uint64_t r = rng();
    for (int k = 0; k < 16; ++k) id += kHex[(r >> (4 * k)) & 15];
  }
  return id;
}

absl::Status CheckModel(absl::string_view model, const ServingContext& ctx) {
  if (model.empty() || model == ctx.model_id) return absl::OkStatus();
  return WithParam(absl::NotFoundError(absl::StrCat("The model `", model, "` does not exist.")),
                   "model", "model_not_found");
}

absl::Status CheckPromptTokens(const std::vector<int32_t>& ids, const ServingContext& ctx,
                               absl::string_view param) {
  if (ids.empty()) {
    return InvalidParam(param, absl::StrCat("'", param, "' must not be empty"));
  }
  if (ctx.max_prompt_tokens > 0 && ids.size() > static_cast<size_t>(ctx.max_prompt_tokens)) {
    return InvalidParam(param,
                        absl::StrCat("the prompt is ", ids.size(),
                                     " tokens, more than this server's limit of ",
                                     ctx.max_prompt_tokens, " (--max-prompt-tokens)"),
                        "prompt_too_long");
  }
  const int vocab = ctx.tokenizer ? ctx.tokenizer->vocab_size() : 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || (vocab > 0 && ids[i] >= vocab)) {
      return InvalidParam(param, absl::StrCat("token id ", ids[i], " at ", param, "[", i,
                                              "] is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

namespace {

absl::Status ResolveLogitsFields(const SamplingFields& f, int vocab, SamplingParams* p) {
  auto name = [&](absl::string_view n) { return absl::StrCat(f.param_prefix, n); };
  // Written so that NaN (which a gRPC float can carry) is refused too.
  auto ranged = [&](const std::optional<double>& v, const char* field, double lo, double hi,
                    bool lo_open, float* out) -> absl::Status {
    if (!v) return absl::OkStatus();
    if (!((lo_open ? *v > lo : *v >= lo) && *v <= hi)) {
      const std::string n = name(field);
      return InvalidParam(n, absl::StrCat("'", n, "' must be in ", lo_open ? "(" : "[", lo, ", ",
                                          hi, "], got ", *v));
    }
    *out = static_cast<float>(*v);
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ranged(f.presence_penalty, "presence_penalty", -2, 2, false, &p->presence_penalty));
  RETURN_IF_ERROR(ranged(f.frequency_penalty, "frequency_penalty", -2, 2, false, &p->frequency_penalty));
  RETURN_IF_ERROR(ranged(f.repetition_penalty, "repetition_penalty", 0, 2, true, &p->repetition_penalty));
  RETURN_IF_ERROR(ranged(f.min_p, "min_p", 0, 1, false, &p->min_p));
  if (f.min_tokens) {
    if (*f.min_tokens < 0 || *f.min_tokens > p->max_tokens) {
      const std::string n = name("min_tokens");
      return InvalidParam(n, absl::StrCat("'", n, "' must be in [0, max_tokens = ", p->max_tokens,
                                          "], got ", *f.min_tokens));
    }
    p->min_tokens = static_cast<int>(*f.min_tokens);
  }
  for (const auto& [id, bias] : f.logit_bias) {
    const std::string n = name("logit_bias");
    if (id < 0 || (vocab > 0 && id >= vocab)) {
      return InvalidParam(n, absl::StrCat("'", n, "' token id ", id,
                                          " is outside the vocabulary [0, ", vocab, ")"));
    }
    if (!(bias >= -100 && bias <= 100)) {
      return InvalidParam(n, absl::StrCat("'", n, "' bias for token ", id,
                                          " must be in [-100, 100], got ", bias));
    }
    p->logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(bias));
  }
  for (size_t i = 0; i < f.bad_words.size(); ++i) {
    if (absl::StripAsciiWhitespace(f.bad_words[i]).empty()) {
      const std::string n = absl::StrCat(name("bad_words"), "[", i, "]");
      return InvalidParam(n, absl::StrCat("'", n, "' must not be blank"));
    }
  }
  p->bad_words = f.bad_words;
  p->skip_special_tokens = f.skip_special_tokens.value_or(true);
  p->include_stop_str_in_output = f.include_stop_str_in_output.value_or(false);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SamplingParams> ResolveSampling(const SamplingFields& f, int prompt_tokens,
                                               const ServingContext& ctx,
                                               absl::string_view prompt_param) {
  auto name = [&](absl::string_view n) { return absl::StrCat(f.param_prefix, n); };
  SamplingParams p;
  if (f.temperature) {
    // Written so NaN (which a gRPC float can carry) is refused too.
    if (!(*f.temperature >= 0 && *f.temperature <= 2)) {
      const std::string n = name("temperature");
      return InvalidParam(n, absl::StrCat("'", n, "' must be in [0, 2], got ", *f.temperature));
    }
    p.temperature = static_cast<float>(*f.temperature);
  }
  if (f.top_p) {
    if (!(*f.top_p > 0) || *f.top_p > 1) {
      const std::string n = name("top_p");
      return InvalidParam(n, absl::StrCat("'", n, "' must be in (0, 1], got ", *f.top_p));
    }
    // A tiny positive double (1e-98) rounds to 0.0f, which would leave the sampler no
    // candidate at all (found by fuzz_openai_api): keep it positive, i.e. the top token only.
    p.top_p = std::max(static_cast<float>(*f.top_p), std::numeric_limits<float>::min());
  }
  if (f.top_k) {
    if (*f.top_k < -1 || *f.top_k > std::numeric_limits<int32_t>::max()) {
      const std::string n = name("top_k");
      return InvalidParam(n, absl::StrCat("'", n, "' must be -1 or 0 (off) or a positive "
                                          "integer, got ", *f.top_k));
    }
    p.top_k = *f.top_k <= 0 ? 0 : static_cast<int>(*f.top_k);
  }
  p.seed = f.seed;
  if (f.logprobs) {
    if (*f.logprobs < 0 || *f.logprobs > kMaxTopLogprobs) {
      const std::string n = name(f.logprobs_param);
      return InvalidParam(n, absl::StrCat("'", n, "' must be in [0, ", kMaxTopLogprobs,
                                          "], got ", *f.logprobs));
    }
    p.logprobs = static_cast<int>(*f.logprobs);
  }
  const int vocab = ctx.tokenizer ? ctx.tokenizer->vocab_size() : 0;
  for (size_t i = 0; i < f.stop_token_ids.size(); ++i) {
    int64_t id = f.stop_token_ids[i];
    if (id < 0 || (vocab > 0 && id >= vocab)) {
      const std::string n = name("stop_token_ids");
      return InvalidParam(n, absl::StrCat(n, "[", i, "] = ", id,
                                          " is outside the vocabulary [0, ", vocab, ")"));
    }
    p.stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  p.stop = f.stop;
  p.ignore_eos = f.ignore_eos;

  if (prompt_tokens >= ctx.max_model_len) {
    return InvalidParam(prompt_param,
                        absl::StrCat("This model's maximum context length is ", ctx.max_model_len,
                                     " tokens. However, your request has ", prompt_tokens,
                                     " input tokens, which leaves no room for a completion. "
                                     "Please reduce the length of the input."),
                        "context_length_exceeded");
  }
  const int room = ctx.max_model_len - prompt_tokens;
  if (f.max_tokens) {
    const int64_t m = *f.max_tokens;
    const std::string n = name(f.max_tokens_param);
    if (m < 1) {
      return InvalidParam(n, absl::StrCat("'", n, "' must be at least 1, got ", m));
    }
    if (m > room) {
      return InvalidParam(
          n,
          absl::StrCat("This model's maximum context length is ", ctx.max_model_len,
                       " tokens. However, you requested ", prompt_tokens + m, " tokens (",
                       prompt_tokens, " in the input, ", m, " in the completion). Please reduce '",
                       n, "' to at most ", room, " or shorten the input."),
          "context_length_exceeded");
    }
    p.max_tokens = static_cast<int>(m);
  } else {
    p.max_tokens = f.default_max_tokens > 0 ? std::min(f.default_max_tokens, room) : room;
  }
  RETURN_IF_ERROR(ResolveLogitsFields(f, vocab, &p));
  return p;
}

absl::Status CheckChatMessages(const std::vector<ChatMessage>& messages, absl::string_view param) {
  if (messages.empty()) return InvalidParam(param, absl::StrCat("'", param, "' must not be empty"));
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool") {
      const std::string p = absl::StrCat(param, "[", i, "].role");
      return InvalidParam(p, absl::StrCat("'", p, "' must be one of system, developer, user, "
                                          "assistant, tool; got '", r, "'"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> RenderChatPrompt(const std::vector<ChatMessage>& messages,
                                                      const ChatRenderOptions& options,
                                                      const ServingContext& ctx) {
  if (!ctx.chat_template || !ctx.tokenizer) {
    return InvalidParam("messages", "this model has no chat template; use /v1/completions");
  }
  // Template errors read "messages[2].tool_calls[0].function.name: missing": name that field.
  auto named = [](absl::Status s) {
    if (ParamOf(s)) return s;
    absl::string_view m = s.message();
    size_t colon = m.find(": ");
    if ((absl::StartsWith(m, "messages") || absl::StartsWith(m, "tools") ||
         absl::StartsWith(m, "chat_template_kwargs")) &&
        colon != absl::string_view::npos && m.substr(0, colon).find(' ') == absl::string_view::npos) {
      return WithParam(s, m.substr(0, colon));
    }
    return WithParam(s, "messages");
  };
  size_t text_bytes = 0;  // the rendered prompt is at least this long
  for (const ChatMessage& m : messages) text_bytes += m.content.size() + m.reasoning.size();
  RETURN_IF_ERROR(CheckPromptBytes(text_bytes, ctx, "messages"));
  // RenderIds keeps message text that spells a special token as plain text.
  absl::StatusOr<std::vector<int32_t>> ids = ctx.chat_template->RenderIds(messages, options);
  if (!ids.ok()) return named(ids.status());
  return ids;
}

namespace {

// The OpenAI "tools" array and "tool_choice" (nullptr = absent) into render options.
absl::Status ReadChatTools(const json* tools, const json* choice, const ServingContext& ctx,
                           ChatRenderOptions* render) {
  std::vector<std::string> tool_names;
  if (tools) {
    if (!tools->is_array()) return WrongType("tools", "an array", *tools);
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string p = absl::StrCat("tools[", i, "]");
      if (!t.is_object()) return WrongType(p, "an object", t);
      const json* type = Field(t, "type");
      if (!type || !type->is_string() || type->get<std::string>() != "function") {
        return InvalidParam(p + ".type", absl::StrCat("'", p, ".type' must be \"function\""));
      }
      const json* fn = Field(t, "function");
      if (!fn || !fn->is_object()) {
        return InvalidParam(p + ".function", absl::StrCat("'", p, ".function' must be an object"));
      }
      const json* name = Field(*fn, "name");
      if (!name || !name->is_string() || name->get_ref<const std::string&>().empty()) {
        return InvalidParam(p + ".function.name",
                            absl::StrCat("'", p, ".function.name' must be a non-empty string"));
      }
      tool_names.push_back(name->get<std::string>());
    }
    if (!tools->empty()) render->tools_json = tools->dump();
  }
  if (choice) {
    // auto: the model decides; none: no tools shown; required and named force the call by
    // ending the prompt inside its header (ChatRenderOptions::forced_tool).
    std::string forced;
    if (choice->is_string()) {
      const std::string c = choice->get<std::string>();
      if (c == "none") {
        render->tools_json.clear();
      } else if (c == "required") {
        // One tool: a call to it is the only way to comply, so its whole header is forced.
        forced = tool_names.size() == 1 ? tool_names[0] : "*";
      } else if (c != "auto") {
        return InvalidParam("tool_choice", absl::StrCat("'tool_choice' must be \"none\", "
                                                        "\"auto\", \"required\" or {\"type\": "
                                                        "\"function\", \"function\": {\"name\": "
                                                        "...}}, got \"", c, "\""));
      }
      render->tool_choice = c;
    } else if (choice->is_object()) {
      const json* type = Field(*choice, "type");
      const json* fn = Field(*choice, "function");
      const json* name = fn && fn->is_object() ? Field(*fn, "name") : nullptr;
      if (!type || !type->is_string() || type->get<std::string>() != "function" || !name ||
          !name->is_string()) {
        return InvalidParam("tool_choice", "'tool_choice' as an object must be {\"type\": "
                            "\"function\", \"function\": {\"name\": \"...\"}}");
      }
      forced = name->get<std::string>();
      if (std::find(tool_names.begin(), tool_names.end(), forced) == tool_names.end()) {
        return InvalidParam("tool_choice", absl::StrCat("'tool_choice' names function '", forced,
                                                        "', which is not in 'tools'"));
      }
    } else {
      return WrongType("tool_choice", "a string or an object", *choice);
    }
    if (!forced.empty()) {
      if (tool_names.empty()) {
        return InvalidParam("tool_choice", "'tool_choice' requires 'tools' to be given");
      }
      if (!ctx.chat_template || !ctx.chat_template->CanForceToolCalls()) {
        return InvalidParam("tool_choice", "this model's chat template cannot force tool calls",
                            "unsupported_parameter");
      }
      render->forced_tool = forced;
    }
  }
  // vLLM: tools without tool_choice mean "auto", which needs --enable-auto-tool-choice.
  const bool auto_choice = !choice || (choice->is_string() && choice->get<std::string>() == "auto");
  if (ctx.refuse_auto_tool_choice && !tool_names.empty() && auto_choice) {
    return absl::InvalidArgumentError(
        "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
  }
  return absl::OkStatus();
}

absl::Status ReadReasoningEffort(const std::optional<std::string>& effort, ChatRenderOptions* render) {
  if (!effort) return absl::OkStatus();
  if (*effort != "low" && *effort != "medium" && *effort != "high") {
    return InvalidParam("reasoning_effort", absl::StrCat("'reasoning_effort' must be low, "
                                                         "medium or high, got '", *effort, "'"));
  }
  render->reasoning_effort = *effort;
  return absl::OkStatus();
}

// chat_template_kwargs: only the keys the model's chat template reads (ChatTemplate::
// TemplateKwargs), each of its type; the template judges the values.
absl::Status ReadTemplateKwargs(const json& j, const ServingContext& ctx, ChatRenderOptions* render) {
  const json* kw = Field(j, "chat_template_kwargs");
  if (!kw) return absl::OkStatus();
  if (!kw->is_object()) return WrongType("chat_template_kwargs", "an object", *kw);
  const std::vector<std::string> known =
      ctx.chat_template ? ctx.chat_template->TemplateKwargs() : std::vector<std::string>{};
  for (auto it = kw->begin(); it != kw->end(); ++it) {
    const std::string p = absl::StrCat("chat_template_kwargs.", it.key());
    if (std::find(known.begin(), known.end(), it.key()) == known.end()) {
      const std::string reads = known.empty() ? "none" : absl::StrJoin(known, ", ");
      return InvalidParam(p, absl::StrCat("'", p, "' is not read by this model's chat template "
                                          "(it reads: ", reads, ")"), "unsupported_parameter");
    }
    if (it.key() == "thinking") {
      if (!it.value().is_boolean()) return WrongType(p, "a boolean", it.value());
      render->thinking = it.value().get<bool>();
    } else if (it.key() == "thinking_effort") {
      if (!it.value().is_string()) return WrongType(p, "a string", it.value());
      render->thinking_effort = it.value().get<std::string>();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ForceStructuredAnswer(bool has_grammar, ChatRenderOptions* render) {
  if (!has_grammar) return absl::OkStatus();
  if (!render->forced_tool.empty()) {
    return InvalidParam("tool_choice", "a forced 'tool_choice' together with structured output "
                        "('response_format', 'guided_*', 'structured_outputs') is not supported",
                        "unsupported_parameter");
  }
  render->forced_final = true;
  return absl::OkStatus();
}

absl::Status ReadChatToolOptions(absl::string_view tools_json, absl::string_view tool_choice,
                                 absl::string_view reasoning_effort, const ServingContext& ctx,
                                 ChatRenderOptions* render) {
  json tools;
  if (!tools_json.empty()) {
    BoundedJsonError where;
    absl::StatusOr<json> parsed = ParseBoundedJson<json>(std::string_view(tools_json.data(), tools_json.size()), {}, &where);
    if (!parsed.ok()) {
      return InvalidParam("tools_json",
                          absl::StrCat("'tools_json' (the OpenAI \"tools\" array) is ",
                                       where.kind == BoundedJsonError::Kind::kDuplicateKey ? "refused: " : "",
                                       parsed.status().message()),
                          where.kind == BoundedJsonError::Kind::kTooDeep ? "json_too_deep"
                          : where.kind == BoundedJsonError::Kind::kDuplicateKey ? "duplicate_key"
                                                                                : "invalid_json");
    }
    tools = *std::move(parsed);
  }
  json choice;
  if (tool_choice == "auto" || tool_choice == "none" || tool_choice == "required") {
    choice = std::string(tool_choice);
  } else if (!tool_choice.empty()) {  // a function's name
    choice = json{{"type", "function"}, {"function", {{"name", std::string(tool_choice)}}}};
  }
  RETURN_IF_ERROR(ReadChatTools(tools_json.empty() ? nullptr : &tools,
                                tool_choice.empty() ? nullptr : &choice, ctx, render));
  return ReadReasoningEffort(reasoning_effort.empty() ? std::nullopt
                                                      : std::optional<std::string>(reasoning_effort),
                             render);
}

absl::StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(absl::string_view body,
                                                                 const ServingContext& ctx) {
  ASSIGN_OR_RETURN(json j, ParseBody(body));
  RETURN_IF_ERROR(GetModel(j, ctx));
  ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, ReadMessages(j));
  ASSIGN_OR_RETURN(const int n_choices, ReadN(j));
  ChatRenderOptions render;
  RETURN_IF_ERROR(ReadChatTools(Field(j, "tools"), Field(j, "tool_choice"), ctx, &render));
  ASSIGN_OR_RETURN(auto output_grammar, ReadStructuredOutput(j));
  RETURN_IF_ERROR(ForceStructuredAnswer(output_grammar != nullptr, &render));
  if (const json* rf = Field(j, "response_format"); rf != nullptr && output_grammar != nullptr) {
    render.response_format_json = rf->dump();  // templates that tell the model (Kimi K3)
  }

  ChatCompletionRequest out;
  ASSIGN_OR_RETURN(auto stream, GetBool(j, "stream"));
  out.stream = stream.value_or(false);
  RETURN_IF_ERROR(ReadStreamOptions(j, out.stream, &out.include_usage));

  ASSIGN_OR_RETURN(auto effort, GetString(j, "reasoning_effort"));
  RETURN_IF_ERROR(ReadReasoningEffort(effort, &render));
  RETURN_IF_ERROR(ReadTemplateKwargs(j, ctx, &render));

  SamplingFields f;
  RETURN_IF_ERROR(ReadCommonSampling(j, &f));
  ASSIGN_OR_RETURN(auto max_tokens, GetInt(j, "max_tokens"));
  ASSIGN_OR_RETURN(auto max_completion_tokens, GetInt(j, "max_completion_tokens"));
  if (max_completion_tokens) {  // the newer name wins, as in vLLM
    f.max_tokens = max_completion_tokens;
    f.max_tokens_param = "max_completion_tokens";
  } else {
    f.max_tokens = max_tokens;
  }
  ASSIGN_OR_RETURN(auto logprobs, GetBool(j, "logprobs"));
  ASSIGN_OR_RETURN(auto top_logprobs, GetInt(j, "top_logprobs"));
  out.logprobs = logprobs.value_or(false);
  if (top_logprobs) {
    if (!out.logprobs) {
      return InvalidParam("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    }
    if (*top_logprobs < 0 || *top_logprobs > kMaxTopLogprobs) {
      return InvalidParam("top_logprobs", absl::StrCat("'top_logprobs' must be in [0, ",
                                                       kMaxTopLogprobs, "], got ", *top_logprobs));
    }
    out.top_logprobs = static_cast<int>(*top_logprobs);
  }
  if (out.logprobs) {
    f.logprobs = out.top_logprobs;
    f.logprobs_param = "top_logprobs";
  }

  ASSIGN_OR_RETURN(std::vector<int32_t> prompt, RenderChatPrompt(messages, render, ctx));
  RETURN_IF_ERROR(CheckPromptTokens(prompt, ctx, "messages"));
  ASSIGN_OR_RETURN(SamplingParams params,
                   ResolveSampling(f, static_cast<int>(prompt.size()), ctx, "messages"));
  for (int32_t id : ctx.chat_template->StopTokenIds()) params.stop_token_ids.push_back(id);
  params.grammar = std::move(output_grammar);

  out.tools = !render.tools_json.empty();
  out.n = n_choices;
  ASSIGN_OR_RETURN(auto as_ids, GetBool(j, "return_tokens_as_token_ids"));  // vLLM extension
  out.tokens_as_ids = as_ids.value_or(false);
  out.render = render;
  out.generate.request_id = NewRequestId("chatcmpl");
  out.generate.prompt_tokens = std::move(prompt);
  out.generate.params = std::move(params);
  return out;
}

absl::StatusOr<CompletionRequest> ParseCompletionRequest(absl::string_view body,
                                                         const ServingContext& ctx) {
  ASSIGN_OR_RETURN(json j, ParseBody(body));
  RETURN_IF_ERROR(GetModel(j, ctx));
  if (!ctx.tokenizer) return absl::FailedPreconditionError("no tokenizer loaded");
  CompletionRequest out;

  const json* prompt = Field(j, "prompt");
  if (!prompt) return InvalidParam("prompt", "'prompt' is required");
  std::vector<int32_t> ids;
  const json* single = prompt;
  if (prompt->is_array() && !prompt->empty() && !(*prompt)[0].is_number()) {
    // A batch: [string] or [[ids]] of one element is that element; more is not supported.
    if (prompt->size() != 1) {
      return InvalidParam("prompt", absl::StrCat("only one prompt per request is supported, got ",
                                                 prompt->size()));
    }
    single = &(*prompt)[0];
  }
  if (single->is_string()) {
    out.prompt_text = single->get<std::string>();
    if (out.prompt_text.empty()) return InvalidParam("prompt", "'prompt' must not be empty");
    RETURN_IF_ERROR(CheckPromptBytes(out.prompt_text.size(), ctx, "prompt"));
    ids = ctx.tokenizer->EncodePrompt(out.prompt_text, /*add_special_tokens=*/true);
  } else if (single->is_array()) {
    ASSIGN_OR_RETURN(ids, ReadTokenArray(*single, "prompt"));
    RETURN_IF_ERROR(CheckPromptTokens(ids, ctx, "prompt"));
    absl::StatusOr<std::string> text = ctx.tokenizer->Decode(ids, /*skip_special=*/false);
    if (!text.ok()) return WithParam(text.status(), "prompt");
    out.prompt_text = *std::move(text);
  } else {
    return WrongType("prompt", "a string, an array of token ids, or an array of one string",
                     *single);
  }
  RETURN_IF_ERROR(CheckPromptTokens(ids, ctx, "prompt"));

  ASSIGN_OR_RETURN(out.n, ReadN(j));
  ASSIGN_OR_RETURN(auto best_of, GetInt(j, "best_of"));
  if (best_of && *best_of != out.n) {
    return InvalidParam("best_of", absl::StrCat("'best_of' must equal 'n' (", out.n,
                                                "): choosing among more samples is not "
                                                "supported, got ", *best_of));
  }
  ASSIGN_OR_RETURN(auto as_ids, GetBool(j, "return_tokens_as_token_ids"));  // vLLM extension
  out.tokens_as_ids = as_ids.value_or(false);
  if (const json* suffix = Field(j, "suffix")) {
    if (!suffix->is_string()) return WrongType("suffix", "a string", *suffix);
    if (!suffix->get_ref<const std::string&>().empty()) {
      return InvalidParam("suffix", "'suffix' is not supported", "unsupported_parameter");
    }
  }
  ASSIGN_OR_RETURN(auto stream, GetBool(j, "stream"));
  out.stream = stream.value_or(false);
  RETURN_IF_ERROR(ReadStreamOptions(j, out.stream, &out.include_usage));
  ASSIGN_OR_RETURN(auto echo, GetBool(j, "echo"));
  out.echo = echo.value_or(false);

  SamplingFields f;
  RETURN_IF_ERROR(ReadCommonSampling(j, &f));
  ASSIGN_OR_RETURN(f.max_tokens, GetInt(j, "max_tokens"));
  f.default_max_tokens = 16;
  ASSIGN_OR_RETURN(f.logprobs, GetInt(j, "logprobs"));
  ASSIGN_OR_RETURN(SamplingParams params,
                   ResolveSampling(f, static_cast<int>(ids.size()), ctx, "prompt"));
  out.logprobs = params.logprobs;
  if (out.echo && params.logprobs >= 0) params.prompt_logprobs = params.logprobs;
  ASSIGN_OR_RETURN(params.grammar, ReadStructuredOutput(j));

  out.generate.request_id = NewRequestId("cmpl");
  out.generate.prompt_tokens = std::move(ids);
  out.generate.params = std::move(params);
  return out;
}

std::vector<GenerateRequest> ChoiceRequests(const GenerateRequest& request, int n) {
  if (n <= 1) return {request};
  std::vector<GenerateRequest> out(n, request);
  for (int i = 0; i < n; ++i) {
    out[i].request_id = absl::StrCat(request.request_id, "-", i);
    if (request.params.seed) out[i].params.seed = *request.params.seed + static_cast<uint64_t>(i);
  }
  return out;
}

absl::StatusOr<std::vector<int32_t>> ParseTokenizeRequest(absl::string_view body,
                                                          const ServingContext& ctx) {
  ASSIGN_OR_RETURN(json j, ParseBody(body));
  RETURN_IF_ERROR(GetModel(j, ctx));
  if (!ctx.tokenizer) return absl::FailedPreconditionError("no tokenizer loaded");
  ASSIGN_OR_RETURN(auto add_special, GetBool(j, "add_special_tokens"));
  const bool has_prompt = Field(j, "prompt") != nullptr;
  const bool has_messages = Field(j, "messages") != nullptr;
  if (has_prompt == has_messages) {
    return InvalidParam(has_prompt ? "messages" : "prompt",
                        "exactly one of 'prompt' or 'messages' is required");
  }
  if (has_prompt) {
    ASSIGN_OR_RETURN(auto prompt, GetString(j, "prompt"));
    RETURN_IF_ERROR(CheckPromptBytes(prompt->size(), ctx, "prompt"));
    return ctx.tokenizer->EncodePrompt(*prompt, add_special.value_or(true));
  }
  ASSIGN_OR_RETURN(std::vector<ChatMessage> messages, ReadMessages(j));
  ChatRenderOptions render;
  ASSIGN_OR_RETURN(auto agp, GetBool(j, "add_generation_prompt"));
  render.add_generation_prompt = agp.value_or(true);
  return RenderChatPrompt(messages, render, ctx);
}

absl::StatusOr<std::vector<int32_t>> ParseDetokenizeRequest(absl::string_view body,
                                                            const ServingContext& ctx) {
  ASSIGN_OR_RETURN(json j, ParseBody(body));
  RETURN_IF_ERROR(GetModel(j, ctx));
  const json* tokens = Field(j, "tokens");
  if (!tokens) return InvalidParam("tokens", "'tokens' is required");
  if (!tokens->is_array()) return WrongType("tokens", "an array of integers", *tokens);
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, ReadTokenArray(*tokens, "tokens"));
  const int vocab = ctx.tokenizer ? ctx.tokenizer->vocab_size() : 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (vocab > 0 && ids[i] >= vocab) {
      return InvalidParam("tokens", absl::StrCat("token id ", ids[i], " at tokens[", i,
                                                 "] is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return ids;
}

}  // namespace mxserve::frontends
