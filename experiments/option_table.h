#pragma once
// Named options: binds dotted names ("relax.iterations", "space.max_stages") to the fields of the
// libraries' option structs, so that an experiment spec or a `--option name=value` flag can set
// any of them. Values arrive as text (a TOML value is written as text first) and are parsed by
// the field's type; a bad value throws InputError naming where it came from, the option, the
// value and the rule. The structs' own Validate() checks ranges after every assignment.
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace stratos {

class OptionTable {
 public:
  // Binds `name` to `*field` (the table keeps the pointer: the struct must outlive it).
  void Int(const std::string& name, int* field, const std::string& doc);
  void Long(const std::string& name, long* field, const std::string& doc);
  void Double(const std::string& name, double* field, const std::string& doc);
  void Bool(const std::string& name, bool* field, const std::string& doc);
  // A field with its own text form: `get` prints it, `set(text, where)` parses it (throwing
  // InputError naming `where` for a bad value).
  void Text(const std::string& name, std::function<std::string()> get,
            std::function<void(const std::string&, const std::string&)> set,
            const std::string& doc);

  bool Has(const std::string& name) const;
  // Parses `value` into the named field. Throws InputError "<where>: <name> = <value>: <rule>"
  // for an unknown name (listing the known ones) or a value of the wrong type.
  void Set(const std::string& name, const std::string& value, const std::string& where);
  // Every option's current value, by name (numbers as numbers, the rest as text).
  nlohmann::json Values() const;
  // "name (type, default): doc" lines, one per option.
  std::vector<std::string> Help() const;
  std::vector<std::string> Names() const;

 private:
  struct Entry {
    std::string name;
    std::string type;
    std::string doc;
    std::function<nlohmann::json()> get;
    std::function<void(const std::string&, const std::string&)> set;
  };
  const Entry* Find(const std::string& name) const;
  std::vector<Entry> entries_;
};

// "name=value" -> (name, value). Throws InputError naming `where` when there is no '='.
std::pair<std::string, std::string> SplitAssignment(const std::string& text,
                                                    const std::string& where);

}  // namespace stratos
