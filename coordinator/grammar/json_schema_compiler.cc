#include "coordinator/grammar/json_schema_compiler.h"

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mxserve::grammar {
namespace {

using json = nlohmann::json;

constexpr int kIntDigits = 18;
constexpr int kFracDigits = 20;
constexpr int kExpDigits = 2;

const std::set<std::string>& SupportedKeywords() {
  static const auto* k = new std::set<std::string>{
      "type",  "properties", "required", "additionalProperties", "items", "enum", "const",
      "anyOf", "$ref",       "$defs",    "definitions",          "title", "description",
      "$schema", "$id",      "$comment", "examples",             "default", "strict"};
  return *k;
}

// Builds the JSON rules shared by every schema (string, number, any value...) on first use.
class JsonRules {
 public:
  explicit JsonRules(Grammar* g) : g_(g) {}

  Frag Sep() { return g_->Opt(g_->Literal(" ")); }  // after ':' and ','

  int32_t String() {
    if (string_ >= 0) return string_;
    string_ = g_->NewRule("string");
    bool allow[128];
    for (int b = 0; b < 128; ++b) allow[b] = b >= 0x20 && b != '"' && b != '\\';
    auto hex = [&] { return g_->Ranges({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}); };
    auto d = [&] { return g_->Ranges({{'D', 'D'}, {'d', 'd'}}); };
    // \uXXXX outside the surrogates, or a high surrogate escape followed by a low one: a lone
    // surrogate is not text (many parsers refuse it).
    Frag plain = g_->Alt({g_->Seq({g_->Ranges({{'0', '9'}, {'A', 'C'}, {'a', 'c'}}), hex(), hex(),
                                   hex()}),
                          g_->Seq({d(), g_->Range('0', '7'), hex(), hex()}),
                          g_->Seq({g_->Ranges({{'E', 'F'}, {'e', 'f'}}), hex(), hex(), hex()})});
    Frag pair = g_->Seq({d(), g_->Ranges({{'8', '9'}, {'A', 'B'}, {'a', 'b'}}), hex(), hex(),
                         g_->Literal("\\u"), d(), g_->Ranges({{'C', 'F'}, {'c', 'f'}}), hex(),
                         hex()});
    Frag escape = g_->Seq(
        {g_->Literal("\\"),
         g_->Alt({g_->Ranges({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'},
                              {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                  g_->Seq({g_->Literal("u"), g_->Alt({plain, pair})})})});
    Frag ch = g_->Alt({g_->Utf8Char(allow), escape});
    g_->SetBody(string_, g_->Seq({g_->Literal("\""), g_->Star(ch), g_->Literal("\"")}));
    return string_;
  }

  // Between min and max decimal digits.
  Frag Digits(int min, int max) {
    std::vector<Frag> parts;
    for (int i = 0; i < min; ++i) parts.push_back(g_->Range('0', '9'));
    Frag tail = g_->Empty();
    for (int i = min; i < max; ++i) tail = g_->Opt(g_->Seq({g_->Range('0', '9'), tail}));
    parts.push_back(tail);
    return g_->Seq(std::move(parts));
  }

  // At most kIntDigits digits: every integer then fits an int64 and a double, and a model
  // cannot run on in digits.
  Frag IntegerBody() {
    return g_->Seq({g_->Opt(g_->Literal("-")),
                    g_->Alt({g_->Literal("0"),
                             g_->Seq({g_->Range('1', '9'), Digits(0, kIntDigits - 1)})})});
  }

  int32_t Integer() {
    if (integer_ < 0) {
      integer_ = g_->NewRule("integer");
      g_->SetBody(integer_, IntegerBody());
    }
    return integer_;
  }

  int32_t Number() {
    if (number_ >= 0) return number_;
    number_ = g_->NewRule("number");
    // Bounded fraction and exponent: the value stays finite (1e99 at most) and short.
    Frag frac = g_->Opt(g_->Seq({g_->Literal("."), Digits(1, kFracDigits)}));
    Frag exp = g_->Opt(g_->Seq({g_->Ranges({{'e', 'e'}, {'E', 'E'}}),
                                g_->Opt(g_->Ranges({{'+', '+'}, {'-', '-'}})),
                                Digits(1, kExpDigits)}));
    g_->SetBody(number_, g_->Seq({IntegerBody(), frac, exp}));
    return number_;
  }

  // Any JSON value; objects and arrays of any values.
  int32_t Value() {
    if (value_ >= 0) return value_;
    value_ = g_->NewRule("value");
    const int32_t object = AnyObject();
    const int32_t array = g_->NewRule("array");
    g_->SetBody(array, g_->Seq({g_->Literal("["),
                                g_->Opt(g_->Seq({g_->Call(value_),
                                                 g_->Star(g_->Seq({g_->Literal(","), Sep(),
                                                                   g_->Call(value_)}))})),
                                g_->Literal("]")}));
    g_->SetBody(value_, g_->Alt({g_->Call(object), g_->Call(array), g_->Call(String()),
                                 g_->Call(Number()), g_->Literal("true"), g_->Literal("false"),
                                 g_->Literal("null")}));
    return value_;
  }

  int32_t AnyObject() {
    if (object_ >= 0) return object_;
    object_ = g_->NewRule("object");
    Value();
    auto member = [&] {
      return g_->Seq({g_->Call(String()), g_->Literal(":"), Sep(), g_->Call(value_)});
    };
    g_->SetBody(object_,
                g_->Seq({g_->Literal("{"),
                         g_->Opt(g_->Seq({member(), g_->Star(g_->Seq({g_->Literal(","), Sep(),
                                                                      member()}))})),
                         g_->Literal("}")}));
    return object_;
  }

 private:
  Grammar* g_;
  int32_t string_ = -1, integer_ = -1, number_ = -1, value_ = -1, object_ = -1;
};

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, Grammar* g) : root_(root), g_(g), rules_(g) {}

  absl::StatusOr<int32_t> Rule(const json& schema, const std::string& path) {
    const int32_t rule = g_->NewRule(path);
    ASSIGN_OR_RETURN(Frag body, Body(schema, path));
    g_->SetBody(rule, body);
    return rule;
  }

 private:
  static absl::Status Refuse(const std::string& path, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("json_schema: ", what, " (at ", path, ")"));
  }

  absl::StatusOr<int32_t> RefRule(const std::string& ref, const std::string& path) {
    auto it = refs_.find(ref);
    if (it != refs_.end()) return it->second;
    if (ref != "#" && !ref.starts_with("#/")) {
      return Refuse(path, absl::StrCat("$ref '", ref, "' is not supported (only '#...' "
                                       "references into the schema itself)"));
    }
    const json* target = &root_;
    if (ref != "#") {
      try {
        target = &root_.at(json::json_pointer(ref.substr(1)));
      } catch (const std::exception&) {
        return Refuse(path, absl::StrCat("$ref '", ref, "' does not resolve"));
      }
    }
    const int32_t rule = g_->NewRule(ref);
    refs_.emplace(ref, rule);  // before the body: the definition may refer to itself
    ASSIGN_OR_RETURN(Frag body, Body(*target, ref));
    g_->SetBody(rule, body);
    return rule;
  }

  absl::StatusOr<Frag> Body(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return g_->Call(rules_.Value());
      return Refuse(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) return Refuse(path, "a schema must be an object");
    for (const auto& [key, value] : s.items()) {
      if (SupportedKeywords().count(key) == 0) {
        return Refuse(path, absl::StrCat("keyword '", key, "' is not supported"));
      }
    }
    if (const auto it = s.find("$ref"); it != s.end()) {
      if (!it->is_string()) return Refuse(path, "'$ref' must be a string");
      ASSIGN_OR_RETURN(int32_t rule, RefRule(it->get<std::string>(), path));
      return g_->Call(rule);
    }
    if (const auto it = s.find("const"); it != s.end()) return ValueLiteral(*it);
    if (const auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Refuse(path, "'enum' must be a non-empty array");
      std::vector<Frag> options;
      for (const json& v : *it) options.push_back(ValueLiteral(v));
      return g_->Alt(std::move(options));
    }
    if (const auto it = s.find("anyOf"); it != s.end()) {
      if (!it->is_array() || it->empty()) return Refuse(path, "'anyOf' must be a non-empty array");
      std::vector<Frag> options;
      for (size_t i = 0; i < it->size(); ++i) {
        ASSIGN_OR_RETURN(int32_t rule, Rule((*it)[i], absl::StrCat(path, "/anyOf/", i)));
        options.push_back(g_->Call(rule));
      }
      return g_->Alt(std::move(options));
    }
    std::vector<std::string> types;
    if (const auto it = s.find("type"); it != s.end()) {
      if (it->is_string()) {
        types.push_back(it->get<std::string>());
      } else if (it->is_array() && !it->empty()) {
        for (const json& t : *it) {
          if (!t.is_string()) return Refuse(path, "'type' must be a string or strings");
          types.push_back(t.get<std::string>());
        }
      } else {
        return Refuse(path, "'type' must be a string or a non-empty array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") ||
               s.contains("required")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else {
      return g_->Call(rules_.Value());
    }
    std::vector<Frag> options;
    for (const std::string& t : types) {
      ASSIGN_OR_RETURN(Frag f, TypeBody(t, s, path));
      options.push_back(f);
    }
    return options.size() == 1 ? options[0] : g_->Alt(std::move(options));
  }

  // A const / enum value, written with the same separators as everything else.
  Frag ValueLiteral(const json& v) {
    if (!v.is_object() && !v.is_array()) return g_->Literal(v.dump());
    std::vector<Frag> parts = {g_->Literal(v.is_object() ? "{" : "[")};
    bool first = true;
    for (const auto& [key, value] : v.items()) {
      if (!first) {
        parts.push_back(g_->Literal(","));
        parts.push_back(rules_.Sep());
      }
      first = false;
      if (v.is_object()) {
        parts.push_back(g_->Literal(json(key).dump() + ":"));
        parts.push_back(rules_.Sep());
      }
      parts.push_back(ValueLiteral(value));
    }
    parts.push_back(g_->Literal(v.is_object() ? "}" : "]"));
    return g_->Seq(std::move(parts));
  }

  absl::StatusOr<Frag> TypeBody(const std::string& type, const json& s, const std::string& path) {
    if (type == "string") return g_->Call(rules_.String());
    if (type == "number") return g_->Call(rules_.Number());
    if (type == "integer") return g_->Call(rules_.Integer());
    if (type == "boolean") return g_->Alt({g_->Literal("true"), g_->Literal("false")});
    if (type == "null") return g_->Literal("null");
    if (type == "array") return ArrayBody(s, path);
    if (type == "object") return ObjectBody(s, path);
    return Refuse(path, absl::StrCat("type '", type, "' is not a JSON Schema type"));
  }

  absl::StatusOr<Frag> ArrayBody(const json& s, const std::string& path) {
    int32_t item;
    if (const auto it = s.find("items"); it != s.end()) {
      ASSIGN_OR_RETURN(item, Rule(*it, path + "/items"));
    } else {
      item = rules_.Value();
    }
    return g_->Seq({g_->Literal("["),
                    g_->Opt(g_->Seq({g_->Call(item),
                                     g_->Star(g_->Seq({g_->Literal(","), rules_.Sep(),
                                                       g_->Call(item)}))})),
                    g_->Literal("]")});
  }

  absl::StatusOr<Frag> ObjectBody(const json& s, const std::string& path) {
    const auto props = s.find("properties");
    const auto addl = s.find("additionalProperties");
    if (addl != s.end() && !addl->is_boolean()) {
      return Refuse(path, "'additionalProperties' as a schema is not supported (only true/false)");
    }
    if (props != s.end() && !props->is_object()) return Refuse(path, "'properties' must be an object");
    std::set<std::string> required;
    if (const auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) return Refuse(path, "'required' must be an array of names");
      for (const json& r : *it) {
        if (!r.is_string()) return Refuse(path, "'required' must be an array of names");
        if (props == s.end() || !props->contains(r.get<std::string>())) {
          return Refuse(path, absl::StrCat("'required' names '", r.get<std::string>(),
                                           "', which is not in 'properties'"));
        }
        required.insert(r.get<std::string>());
      }
    }
    if (props == s.end() || props->empty()) {
      const bool closed = addl != s.end() && !addl->get<bool>();
      return closed ? g_->Literal("{}") : g_->Call(rules_.AnyObject());
    }
    // States before property i: none written yet (`none`), or some (`some`).
    struct Prop {
      std::string key;
      int32_t rule;
      bool required;
    };
    std::vector<Prop> list;
    for (const auto& [name, sub] : props->items()) {
      ASSIGN_OR_RETURN(int32_t rule, Rule(sub, absl::StrCat(path, "/properties/", name)));
      list.push_back({json(name).dump(), rule, required.count(name) > 0});
    }
    auto member = [&](const Prop& p, bool comma) {
      std::vector<Frag> parts;
      if (comma) parts = {g_->Literal(","), rules_.Sep()};
      parts.push_back(g_->Literal(p.key + ":"));
      parts.push_back(rules_.Sep());
      parts.push_back(g_->Call(p.rule));
      return g_->Seq(std::move(parts));
    };
    Frag open = g_->Literal("{");
    Frag none = g_->Empty();
    Frag some = g_->Empty();
    bool none_alive = true;  // can every property so far have been left out?
    g_->Seq({open, none});
    for (const Prop& p : list) {
      Frag next_none = g_->Empty();
      Frag next_some = g_->Empty();
      g_->Seq({some, member(p, true), next_some});
      if (none_alive) g_->Seq({none, member(p, false), next_some});
      if (!p.required) {
        g_->Seq({none, next_none});
        g_->Seq({some, next_some});
      }
      none_alive = none_alive && !p.required;
      none = next_none;
      some = next_some;
    }
    Frag close = g_->Literal("}");
    Frag end = g_->Empty();
    g_->Seq({some, close});
    if (none_alive) g_->Seq({none, g_->Literal("}"), end});
    g_->Seq({close, end});  // both paths end at `end`
    return Frag{open.in, end.out};
  }

  const json& root_;
  Grammar* g_;
  JsonRules rules_;
  std::map<std::string, int32_t> refs_;
};

}  // namespace

absl::StatusOr<int32_t> CompileJsonSchemaRule(const nlohmann::json& schema, Grammar* grammar) {
  SchemaCompiler compiler(schema, grammar);
  return compiler.Rule(schema, "#");
}

int32_t CompileAnyJsonObjectRule(Grammar* grammar) { return JsonRules(grammar).AnyObject(); }

}  // namespace mxserve::grammar
