// The JSON Schema compiler against its twin: nlohmann's parser, a plain recursive validator of
// the same subset, and a check of the bounded whitespace and property order. Random sentences of
// the automaton must satisfy the twin; random valid instances (and mutations of them) must get
// the twin's answer.
#include "coordinator/grammar/json_schema_compiler.h"

#include <cmath>
#include <random>
#include <set>
#include <string>

#include "coordinator/grammar/structured_output.h"
#include "gtest/gtest.h"
#include "tests/grammar/grammar_test_util.h"

namespace mxserve::grammar {
namespace {

using json = nlohmann::json;

// --- the twin -------------------------------------------------------------------------------

const json& Resolve(const json& root, const json& s) {
  if (s.is_object() && s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return Resolve(root, ref == "#" ? root : root.at(json::json_pointer(ref.substr(1))));
  }
  return s;
}

bool Valid(const json& root, const json& schema, const json& v) {
  const json& s = Resolve(root, schema);
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) {
    for (const json& e : s["enum"]) {
      if (v == e) return true;
    }
    return false;
  }
  if (s.contains("anyOf")) {
    for (const json& sub : s["anyOf"]) {
      if (Valid(root, sub, v)) return true;
    }
    return false;
  }
  if (!s.contains("type")) {
    if (s.contains("properties")) return v.is_object() && Valid(root, json{{"type", "object"}, {"properties", s["properties"]}}, v);
    return true;
  }
  std::vector<std::string> types;
  if (s["type"].is_string()) {
    types.push_back(s["type"]);
  } else {
    for (const json& t : s["type"]) types.push_back(t);
  }
  for (const std::string& t : types) {
    if (t == "string" && v.is_string()) return true;
    if (t == "number" && v.is_number()) return true;
    if (t == "integer" && v.is_number_integer()) return true;
    if (t == "boolean" && v.is_boolean()) return true;
    if (t == "null" && v.is_null()) return true;
    if (t == "array" && v.is_array()) {
      bool ok = true;
      if (s.contains("items")) {
        for (const json& item : v) ok = ok && Valid(root, s["items"], item);
      }
      if (ok) return true;
    }
    if (t == "object" && v.is_object()) {
      bool ok = true;
      const json props = s.value("properties", json::object());
      for (const json& r : s.value("required", json::array())) ok = ok && v.contains(r);
      for (const auto& [k, val] : v.items()) {
        if (props.contains(k)) {
          ok = ok && Valid(root, props[k], val);
        } else if (!props.empty() || s.value("additionalProperties", true) == false) {
          ok = false;  // the grammar writes only the listed properties
        }
      }
      if (ok) return true;
    }
  }
  return false;
}

// Whitespace only as one space after ',' or ':' outside strings.
bool BoundedWhitespace(const std::string& text) {
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (c != ' ' || i == 0 || (text[i - 1] != ',' && text[i - 1] != ':')) return false;
    }
  }
  return true;
}

// Members of every object that has listed properties appear in the listed (sorted) order, and
// no key twice.
bool OrderedKeys(const json& root, const json& schema, const std::string& text);

bool Twin(const json& schema, const std::string& text) {
  if (!json::accept(text)) return false;
  const json v = json::parse(text);
  return Valid(schema, schema, v) && BoundedWhitespace(text) && OrderedKeys(schema, schema, text);
}

// Key order: re-read with ordered_json and compare each object's key sequence with its sorted
// order (the compiler lists properties sorted, as nlohmann::json stores them).
bool KeysSorted(const nlohmann::ordered_json& v) {
  if (v.is_object()) {
    std::string prev;
    bool first = true;
    for (const auto& [k, val] : v.items()) {
      if (!first && !(prev < k)) return false;
      prev = k;
      first = false;
      if (!KeysSorted(val)) return false;
    }
  } else if (v.is_array()) {
    for (const auto& e : v) {
      if (!KeysSorted(e)) return false;
    }
  }
  return true;
}

bool OrderedKeys(const json&, const json&, const std::string& text) {
  // The schemas below give every object listed properties, so all objects are ordered.
  return KeysSorted(nlohmann::ordered_json::parse(text));
}

// --- random instances -----------------------------------------------------------------------

json RandomInstance(const json& root, const json& schema, std::mt19937_64& rng, int depth) {
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  const json& s = Resolve(root, schema);
  if (s.contains("const")) return s["const"];
  if (s.contains("enum")) return s["enum"][pick(static_cast<int>(s["enum"].size()))];
  if (s.contains("anyOf")) {
    return RandomInstance(root, s["anyOf"][pick(static_cast<int>(s["anyOf"].size()))], rng, depth);
  }
  std::string t = s["type"].is_string() ? s["type"].get<std::string>()
                                         : s["type"][pick(static_cast<int>(s["type"].size()))].get<std::string>();
  if (t == "string") {
    static const char* strings[] = {"", "x", "hello world", "quote\" back\\slash", "\xc3\xa9t\xc3\xa9",
                                    "tab\t new\nline", "\xf0\x9f\x98\x80"};
    return strings[pick(7)];
  }
  if (t == "integer") return pick(2000) - 1000;
  if (t == "number") return (pick(2000) - 1000) / 8.0;
  if (t == "boolean") return pick(2) == 1;
  if (t == "null") return nullptr;
  if (t == "array") {
    json a = json::array();
    const int n = depth > 3 ? 0 : pick(4);
    for (int i = 0; i < n; ++i) a.push_back(RandomInstance(root, s["items"], rng, depth + 1));
    return a;
  }
  json o = json::object();
  std::set<std::string> required;
  for (const json& r : s.value("required", json::array())) required.insert(r);
  for (const auto& [k, sub] : s["properties"].items()) {
    if (required.count(k) || (depth < 3 && pick(2) == 0)) o[k] = RandomInstance(root, sub, rng, depth + 1);
  }
  return o;
}

// Compact text with ", " / ": " separators chosen at random per separator.
std::string Serialize(const json& v, std::mt19937_64& rng) {
  auto sp = [&] { return std::bernoulli_distribution(0.5)(rng) ? std::string(" ") : std::string(); };
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, val] : v.items()) {
      if (!first) out += "," + sp();
      first = false;
      out += json(k).dump() + ":" + sp() + Serialize(val, rng);
    }
    return out + "}";
  }
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? "," + sp() : "") + Serialize(v[i], rng);
    return out + "]";
  }
  return v.dump();
}

std::string Mutate(std::string s, std::mt19937_64& rng) {
  static const std::string alphabet = "{}[]\",: 0123456789-.eEtruefalsnl\\ax";
  auto pick = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
  const int edits = 1 + static_cast<int>(pick(2));
  for (int e = 0; e < edits; ++e) {
    const size_t pos = s.empty() ? 0 : pick(s.size() + 1);
    const char c = alphabet[pick(alphabet.size())];
    switch (pick(3)) {
      case 0: s.insert(s.begin() + pos, c); break;
      case 1: if (pos < s.size()) s.erase(s.begin() + pos); break;
      default: if (pos < s.size()) s[pos] = c; break;
    }
  }
  return s;
}

const char* kSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
        "tags":{"type":"array","items":{"type":"string"}}},
        "required":["name","age","tags"],"additionalProperties":false})",
    R"({"type":"object","properties":{"a":{"type":"number"},"b":{"type":["boolean","null"]},
        "c":{"enum":["x",1,null,{"k":[1,2]}]},"d":{"const":"fixed"}},"required":["b"]})",
    R"({"$defs":{"node":{"type":"object","properties":{"value":{"type":"integer"},
        "children":{"type":"array","items":{"$ref":"#/$defs/node"}}},
        "required":["value","children"],"additionalProperties":false}},
        "$ref":"#/$defs/node"})",
    R"({"type":"object","properties":{"shape":{"anyOf":[
        {"type":"object","properties":{"kind":{"const":"circle"},"r":{"type":"number"}},
         "required":["kind","r"],"additionalProperties":false},
        {"type":"object","properties":{"kind":{"const":"rect"},"w":{"type":"number"},
         "h":{"type":"number"}},"required":["kind","w","h"],"additionalProperties":false}]},
        "note":{"anyOf":[{"type":"string"},{"type":"null"}]}},
        "required":["shape","note"],"additionalProperties":false})",
    R"({"type":"object","properties":{"opt1":{"type":"boolean"},"opt2":{"type":"null"},
        "opt3":{"type":"integer"}},"additionalProperties":false})",
};

std::shared_ptr<CompiledGrammar> Schema(const json& schema) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  spec.schema = schema;
  auto g = CompileStructuredOutput(spec);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

TEST(JsonSchemaCompilerTest, RandomSentencesSatisfyTheTwin) {
  std::mt19937_64 rng(541);
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    auto g = Schema(schema);
    ASSERT_NE(g, nullptr);
    int complete = 0;
    for (int i = 0; i < 300; ++i) {
      auto sentence = RandomSentence(*g, rng, 0.5, 4000);
      if (!sentence) continue;
      ++complete;
      EXPECT_TRUE(Twin(schema, *sentence)) << text << "\n" << *sentence;
    }
    EXPECT_GT(complete, 30) << text;
  }
}

TEST(JsonSchemaCompilerTest, ValidInstancesAndMutationsGetTheTwinsAnswer) {
  std::mt19937_64 rng(542);
  for (const char* text : kSchemas) {
    const json schema = json::parse(text);
    auto g = Schema(schema);
    ASSERT_NE(g, nullptr);
    int accepted_mutants = 0;
    for (int i = 0; i < 300; ++i) {
      const std::string valid = Serialize(RandomInstance(schema, schema, rng, 0), rng);
      ASSERT_TRUE(Twin(schema, valid)) << valid;
      EXPECT_TRUE(Accepts(*g, valid)) << text << "\n" << valid;
      const std::string mutant = Mutate(valid, rng);
      const bool twin = Twin(schema, mutant);
      accepted_mutants += twin;
      EXPECT_EQ(Accepts(*g, mutant), twin) << text << "\n" << mutant;
    }
    (void)accepted_mutants;
  }
}

TEST(JsonSchemaCompilerTest, JsonObjectIsAnyObjectWithBoundedWhitespace) {
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonObject;
  auto g = *CompileStructuredOutput(spec);
  EXPECT_TRUE(Accepts(*g, R"({"a": [1, {"b":null}], "c":"d"})"));
  EXPECT_TRUE(Accepts(*g, "{}"));
  EXPECT_FALSE(Accepts(*g, "[]"));
  EXPECT_FALSE(Accepts(*g, R"({"a":  1})"));   // two spaces
  EXPECT_FALSE(Accepts(*g, R"({ "a":1})"));    // space after '{'
  EXPECT_FALSE(Accepts(*g, R"({"a":1} )"));    // trailing space
  EXPECT_FALSE(Accepts(*g, R"({"a":01})"));
  EXPECT_FALSE(Accepts(*g, "{\"a\":\"\x01\"}"));  // control character in a string
  EXPECT_FALSE(Accepts(*g, "{\"a\":\"\xc3\"}"));  // broken UTF-8
  std::mt19937_64 rng(543);
  for (int i = 0; i < 300; ++i) {
    auto s = RandomSentence(*g, rng, 0.4, 4000);
    if (!s) continue;
    EXPECT_TRUE(json::accept(*s) && json::parse(*s).is_object() && BoundedWhitespace(*s)) << *s;
  }
}

TEST(JsonSchemaCompilerTest, UnsupportedKeywordsAreNamed) {
  for (const char* kw : {"minLength", "pattern", "oneOf", "allOf", "minimum", "format",
                         "patternProperties", "prefixItems", "minItems", "not"}) {
    json schema = {{"type", "object"},
                   {"properties", {{"x", {{"type", "string"}, {kw, 1}}}}},
                   {"required", {"x"}}};
    StructuredOutputSpec spec;
    spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
    spec.schema = schema;
    auto g = CompileStructuredOutput(spec);
    ASSERT_FALSE(g.ok()) << kw;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(std::string("'") + kw + "'"), std::string::npos)
        << g.status();
    EXPECT_NE(g.status().message().find("#/properties/x"), std::string::npos) << g.status();
  }
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  spec.schema = json::parse(R"({"$ref":"#/$defs/missing"})");
  EXPECT_FALSE(CompileStructuredOutput(spec).ok());
  spec.schema = json::parse(R"({"type":"object","properties":{},"required":["a"]})");
  EXPECT_FALSE(CompileStructuredOutput(spec).ok());
}

}  // namespace
}  // namespace mxserve::grammar
