#include "commux/options.hpp"

#include "config/settings.hpp"

namespace commux {

Config Config::fromEnvironment() {
  Config c;
  for (const Setting& s : settings()) {
    if (s.read != nullptr) s.read(s.name, c);
  }
  return c;
}

const Config& Config::get() {
  static const Config config = fromEnvironment();
  return config;
}

}  // namespace commux
