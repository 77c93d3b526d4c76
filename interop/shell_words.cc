// Splitting launch scripts into words (see targets.h ShellWords).
#include <cctype>
#include <map>
#include <string>
#include <vector>

#include "interop/targets.h"

namespace stratos {

namespace {

bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Expands the variable reference starting at text[i] == '$'; advances i past it.
std::string Expand(const std::string& text, size_t& i,
                   const std::map<std::string, std::string>& variables) {
  ++i;  // '$'
  std::string name, fallback;
  bool has_fallback = false;
  if (i < text.size() && text[i] == '{') {
    const size_t close = text.find('}', i);
    if (close == std::string::npos) {
      i = text.size();
      return "";
    }
    std::string inner = text.substr(i + 1, close - i - 1);
    i = close + 1;
    const size_t colon = inner.find(":-");
    if (colon != std::string::npos) {
      fallback = inner.substr(colon + 2);
      has_fallback = true;
      inner = inner.substr(0, colon);
    }
    name = inner;
  } else {
    while (i < text.size() && IsNameChar(text[i])) name += text[i++];
    if (name.empty()) return "$";
  }
  auto it = variables.find(name);
  if (it != variables.end() && !(has_fallback && it->second.empty())) return it->second;
  return has_fallback ? fallback : "";
}

}  // namespace

std::vector<std::string> ShellWords(const std::string& text) {
  std::vector<std::string> words;
  std::map<std::string, std::string> variables;
  std::string word;
  bool in_word = false;
  auto finish = [&]() {
    if (!in_word) return;
    const size_t eq = word.find('=');
    if (eq != std::string::npos && eq > 0 && !std::isdigit(static_cast<unsigned char>(word[0]))) {
      bool name = true;
      for (size_t k = 0; k < eq; ++k) name = name && IsNameChar(word[k]);
      if (name) variables[word.substr(0, eq)] = word.substr(eq + 1);
    }
    words.push_back(word);
    word.clear();
    in_word = false;
  };
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size()) {
      if (text[i + 1] != '\n') {
        word += text[i + 1];
        in_word = true;
      }
      i += 2;
    } else if (c == '\'') {
      const size_t close = text.find('\'', i + 1);
      const size_t end = close == std::string::npos ? text.size() : close;
      word += text.substr(i + 1, end - i - 1);
      in_word = true;
      i = end + 1;
    } else if (c == '"') {
      in_word = true;
      for (++i; i < text.size() && text[i] != '"';) {
        if (text[i] == '\\' && i + 1 < text.size()) {
          word += text[i + 1];
          i += 2;
        } else if (text[i] == '$') {
          word += Expand(text, i, variables);
        } else {
          word += text[i++];
        }
      }
      ++i;
    } else if (c == '$') {
      word += Expand(text, i, variables);
      in_word = true;
    } else if (c == '#' && !in_word) {
      while (i < text.size() && text[i] != '\n') ++i;
    } else if (std::isspace(static_cast<unsigned char>(c)) || c == ';' || c == '&' || c == '|' ||
               c == '(' || c == ')') {
      finish();
      ++i;
    } else {
      word += c;
      in_word = true;
      ++i;
    }
  }
  finish();
  return words;
}

std::map<std::string, std::string> FlagValues(const std::vector<std::string>& words) {
  std::map<std::string, std::string> flags;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w.size() < 3 || w.compare(0, 2, "--") != 0) continue;
    const size_t eq = w.find('=');
    if (eq != std::string::npos) {
      flags[w.substr(0, eq)] = w.substr(eq + 1);
    } else if (i + 1 < words.size() && words[i + 1].compare(0, 2, "--") != 0) {
      flags[w] = words[i + 1];
    } else {
      flags[w] = "";
    }
  }
  return flags;
}

}  // namespace stratos
