#include "config_file.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>

namespace rlock::cli {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Reads a quoted string starting at text[0] (a quote); returns the rest of the line after it.
std::string_view read_string(std::string_view text, std::string& out, std::string& error) {
  char quote = text.front();
  out.clear();
  for (size_t i = 1; i < text.size(); ++i) {
    char c = text[i];
    if (c == quote) return text.substr(i + 1);
    if (c == '\\' && quote == '"') {
      if (++i >= text.size()) break;
      switch (text[i]) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        default: error = fmt::format("unknown escape \\{}", text[i]); return {};
      }
      continue;
    }
    out += c;
  }
  error = "unterminated string";
  return {};
}

}  // namespace

ConfigValues parse_config(std::string_view text, const std::string& path) {
  ConfigValues values;
  size_t line_no = 0;
  for (size_t start = 0; start <= text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = util::trim(text.substr(start, end - start));
    start = end + 1;
    ++line_no;
    auto fail = [&](const std::string& why) {
      throw Error(exit_code::k_config, fmt::format("{}:{}: {}", path, line_no, why));
    };
    if (line.empty() || line.front() == '#') continue;
    if (line.front() == '[') fail("tables are not supported: put every setting at the top level");
    size_t eq = line.find('=');
    if (eq == std::string_view::npos) fail("expected name = value");
    std::string name(util::trim(line.substr(0, eq)));
    if (name.empty() || !std::all_of(name.begin(), name.end(), is_name_char)) {
      fail(fmt::format("bad setting name '{}'", name));
    }
    std::replace(name.begin(), name.end(), '_', '-');
    std::string_view rest = util::trim(line.substr(eq + 1));
    if (rest.empty()) fail(fmt::format("no value for {}", name));
    std::string value;
    if (rest.front() == '"' || rest.front() == '\'') {
      std::string error;
      rest = util::trim(read_string(rest, value, error));
      if (!error.empty()) fail(error);
    } else {
      size_t stop = rest.find('#');
      value = std::string(util::trim(rest.substr(0, stop)));
      rest = stop == std::string_view::npos ? std::string_view() : rest.substr(stop);
      bool number = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
        return (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+' || c == '_';
      });
      if (!number && value != "true" && value != "false") {
        fail(fmt::format("the value of {} must be a quoted string, a number, true or false", name));
      }
    }
    if (!rest.empty() && rest.front() != '#') fail("unexpected text after the value");
    if (values.count(name)) fail(fmt::format("{} is set twice", name));
    values[name] = value;
  }
  return values;
}

}  // namespace rlock::cli
