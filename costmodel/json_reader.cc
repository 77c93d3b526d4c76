#include "costmodel/json_reader.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "costmodel/error.h"

namespace stratos {

namespace {

using nlohmann::json;

// nlohmann-json's SAX interface building the document, as json::parse does, while keeping the
// key path of the value being parsed: a number that overflows a double is reported by the
// parser through parse_error (id 406), and the path names where it was.
class PathTrackingBuilder {
 public:
  PathTrackingBuilder(json& root, const std::string& where) : root_(root), where_(where) {}

  bool null() { return Add(nullptr); }
  bool boolean(bool value) { return Add(value); }
  bool number_integer(json::number_integer_t value) { return Add(value); }
  bool number_unsigned(json::number_unsigned_t value) { return Add(value); }
  bool number_float(json::number_float_t value, const json::string_t&) { return Add(value); }
  bool string(json::string_t& value) { return Add(std::move(value)); }
  bool binary(json::binary_t& value) { return Add(json::binary(std::move(value))); }
  bool start_object(std::size_t) { return Open(json::object()); }
  bool key(json::string_t& key) {
    key_ = key;
    return true;
  }
  bool end_object() { return Close(); }
  bool start_array(std::size_t) { return Open(json::array()); }
  bool end_array() { return Close(); }

  bool parse_error(std::size_t, const std::string& last_token, const json::exception& error) {
    if (error.id == 406)  // out_of_range.406: number overflow
      ThrowInputError(where_, PathOfNext(), last_token, "must be a finite number");
    throw InputError(fmt::format("{}: JSON parse error: {}", where_, error.what()));
  }

 private:
  struct Frame {
    json* container;
    std::string path;
  };

  // The key path of the value that comes next.
  std::string PathOfNext() const {
    if (open_.empty()) return "(top level)";
    const Frame& top = open_.back();
    if (top.container->is_array()) return fmt::format("{}[{}]", top.path, top.container->size());
    return top.path.empty() ? key_ : top.path + "." + key_;
  }

  // Places `value` where the next value goes; returns it.
  json* Place(json&& value) {
    if (open_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& container = *open_.back().container;
    if (container.is_array()) {
      container.push_back(std::move(value));
      return &container.back();
    }
    json& slot = container[key_];
    slot = std::move(value);
    return &slot;
  }
  bool Add(json&& value) {
    Place(std::move(value));
    return true;
  }
  bool Open(json&& container) {
    std::string path = PathOfNext();
    if (open_.empty()) path.clear();
    open_.push_back({Place(std::move(container)), std::move(path)});
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  json& root_;
  const std::string& where_;
  std::vector<Frame> open_;  // the objects and arrays being filled, outermost first
  std::string key_;          // the last key read in the innermost object
};

}  // namespace

json ParseJsonText(std::string_view text, const std::string& where) {
  json root;
  PathTrackingBuilder builder(root, where);
  json::sax_parse(text.begin(), text.end(), &builder);
  return root;
}

json ReadJsonInputFile(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path))
    throw InputError(fmt::format("{}: cannot open {}", path, what));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseJsonText(buffer.str(), path);
}

JsonObjectReader::JsonObjectReader(const json& object, std::string where, std::string path)
    : object_(object), where_(std::move(where)), path_(std::move(path)) {
  if (!object_.is_object())
    ThrowInputError(where_, path_.empty() ? "(top level)" : path_, object_.dump(),
                    "must be a JSON object");
}

std::string JsonObjectReader::Key(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

const json& JsonObjectReader::Get(const std::string& key) {
  seen_.insert(key);
  if (!object_.contains(key))
    throw InputError(fmt::format("{}: {}: missing required key", where_, Key(key)));
  return object_.at(key);
}

std::string JsonObjectReader::String(const std::string& key) {
  const json& value = Get(key);
  if (!value.is_string()) ThrowInputError(where_, Key(key), value.dump(), "must be a string");
  return value.get<std::string>();
}

bool JsonObjectReader::Bool(const std::string& key) {
  const json& value = Get(key);
  if (!value.is_boolean())
    ThrowInputError(where_, Key(key), value.dump(), "must be a boolean (true or false)");
  return value.get<bool>();
}

void JsonObjectReader::RejectUnknown(const std::set<std::string>& also_allowed) const {
  for (const auto& item : object_.items()) {
    if (seen_.count(item.key()) || also_allowed.count(item.key())) continue;
    std::string known;
    for (const std::string& k : seen_) known += (known.empty() ? "" : ", ") + k;
    throw InputError(
        fmt::format("{}: {}: unknown key (known keys: {})", where_, Key(item.key()), known));
  }
}

}  // namespace stratos
