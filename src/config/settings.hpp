#pragma once
// Every COMMUX_* run-time setting, described once: Config::fromEnvironment reads them from
// this table, commux.config() shows them from it, and docs/settings.md's table of settings is
// printed from it (python3 -m commux.info --settings-table; a test compares the two).
#include <string>
#include <variant>
#include <vector>

#include "commux/options.hpp"

namespace commux {

/// A setting's value as commux.config() shows it; monostate: chosen later (per host, per
/// group).
using SettingValue = std::variant<std::monostate, bool, long long, std::string>;

struct Setting {
  const char* name;
  /// The default as docs/settings.md states it (markdown).
  const char* defaultText;
  /// What it does (markdown, one line of docs/settings.md's table).
  const char* doc;
  /// Reads the variable into the configuration, raising std::invalid_argument naming it
  /// when its value does not fit; null for a setting the Python package reads itself.
  void (*read)(const char* name, Config& config);
  /// Its value in `config`; null where `read` is.
  SettingValue (*show)(const Config& config);
};

/// In docs/settings.md's order.
const std::vector<Setting>& settings();

}  // namespace commux
