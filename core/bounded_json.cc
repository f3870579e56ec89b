#include "core/bounded_json.h"

#include <map>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace mxserve {
namespace {

// nlohmann's SAX events into a value, with the open containers on an explicit stack (no
// recursion). A callback returning false stops the parse at once.
template <typename BasicJson>
class BoundedDomBuilder {
 public:
  using number_integer_t = typename BasicJson::number_integer_t;
  using number_unsigned_t = typename BasicJson::number_unsigned_t;
  using number_float_t = typename BasicJson::number_float_t;
  using string_t = typename BasicJson::string_t;
  using binary_t = typename BasicJson::binary_t;
  using object_t = typename BasicJson::object_t;
  using array_t = typename BasicJson::array_t;

  explicit BoundedDomBuilder(const BoundedJsonLimits& limits) : limits_(limits) {}

  bool null() { return Put(BasicJson(nullptr)); }
  bool boolean(bool v) { return Put(BasicJson(v)); }
  bool number_integer(number_integer_t v) { return Put(BasicJson(v)); }
  bool number_unsigned(number_unsigned_t v) { return Put(BasicJson(v)); }
  bool number_float(number_float_t v, const string_t&) { return Put(BasicJson(v)); }
  bool string(string_t& v) { return Put(BasicJson(std::move(v))); }
  bool binary(binary_t&) { return false; }  // JSON text has none

  bool start_object(std::size_t) { return Open(BasicJson::value_t::object); }
  bool start_array(std::size_t) { return Open(BasicJson::value_t::array); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }

  bool key(string_t& k) {
    Level& top = open_.back();
    if (limits_.refuse_duplicate_keys && !top.keys.insert(k).second) {
      top.key = std::move(k);
      error_.kind = BoundedJsonError::Kind::kDuplicateKey;
      error_.path = Path();
      message_ = absl::StrCat("duplicate key \"", top.key, "\" at ", error_.path,
                              " (each key may appear once per object)");
      return false;
    }
    top.key = std::move(k);
    return true;
  }

  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception& ex) {
    error_.kind = BoundedJsonError::Kind::kSyntax;
    error_.path.clear();
    message_ = absl::StrCat("not valid JSON: ", ex.what());
    return false;
  }

  BasicJson& root() { return root_; }
  const BoundedJsonError& error() const { return error_; }
  const std::string& message() const { return message_; }

 private:
  struct Level {
    BasicJson* value;
    bool is_array;
    size_t index = 0;                       // arrays: elements so far
    string_t key;                           // objects: the current member's key
    std::unordered_set<string_t> keys;      // objects: every key so far
  };

  // "messages[0].role": the members and indices leading to the current position.
  // Too-deep paths are cut after kShownLevels levels ("...") to keep the answer short.
  static constexpr size_t kShownLevels = 8;
  std::string Path() const {
    std::string p;
    for (size_t i = 0; i < open_.size(); ++i) {
      if (i == kShownLevels && placing_) {
        p += "...";
        break;
      }
      const Level& l = open_[i];
      if (l.is_array) {
        // The open child sits at index-1; a value being refused would go at index.
        const bool next = i + 1 == open_.size() && placing_;
        absl::StrAppend(&p, "[", next ? l.index : l.index - 1, "]");
      } else {
        if (!p.empty()) p += '.';
        p += l.key;
      }
    }
    return p.empty() ? "the top level" : p;
  }

  // Where the next value goes: the root, the end of the open array, or the open object's key.
  BasicJson* Slot(BasicJson v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Level& top = open_.back();
    if (top.is_array) {
      auto& arr = top.value->template get_ref<array_t&>();
      arr.push_back(std::move(v));
      ++top.index;
      return &arr.back();
    }
    auto& obj = top.value->template get_ref<object_t&>();
    if constexpr (std::is_same_v<object_t, std::map<typename object_t::key_type,
                                                    typename object_t::mapped_type,
                                                    typename object_t::key_compare,
                                                    typename object_t::allocator_type>>) {
      return &obj.insert_or_assign(top.key, std::move(v)).first->second;
    } else {
      // ordered_map's own insert searches linearly; the key set above already did that work.
      obj.emplace_back(top.key, std::move(v));
      return &obj.back().second;
    }
  }

  bool Put(BasicJson v) {
    Slot(std::move(v));
    return true;
  }

  bool Open(typename BasicJson::value_t type) {
    if (static_cast<int>(open_.size()) >= limits_.max_depth) {
      placing_ = true;
      error_.kind = BoundedJsonError::Kind::kTooDeep;
      error_.path = Path();
      message_ = absl::StrCat("nested deeper than ", limits_.max_depth,
                              " levels of objects and arrays (the limit) at ", error_.path);
      return false;
    }
    BasicJson* v = Slot(BasicJson(type));
    open_.push_back(Level{v, type == BasicJson::value_t::array});
    return true;
  }

  bool Close() {
    open_.pop_back();
    return true;
  }

  const BoundedJsonLimits limits_;
  BasicJson root_;
  std::vector<Level> open_;
  bool placing_ = false;  // Path() for a value not yet placed
  BoundedJsonError error_;
  std::string message_;
};

}  // namespace

template <typename BasicJson>
absl::StatusOr<BasicJson> ParseBoundedJson(std::string_view text, const BoundedJsonLimits& limits,
                                           BoundedJsonError* error) {
  BoundedDomBuilder<BasicJson> builder(limits);
  bool ok = false;
  try {
    ok = BasicJson::sax_parse(text, &builder);
  } catch (const std::exception& e) {  // allocation failure or a bug: refuse, never escape
    if (error) *error = BoundedJsonError{};
    return absl::InvalidArgumentError(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!ok) {
    if (error) *error = builder.error();
    return absl::InvalidArgumentError(builder.message());
  }
  return std::move(builder.root());
}

template absl::StatusOr<nlohmann::json> ParseBoundedJson<nlohmann::json>(
    std::string_view, const BoundedJsonLimits&, BoundedJsonError*);
template absl::StatusOr<nlohmann::ordered_json> ParseBoundedJson<nlohmann::ordered_json>(
    std::string_view, const BoundedJsonLimits&, BoundedJsonError*);

}  // namespace mxserve
