#include "config/process_engine.hpp"

#include "commux/options.hpp"
#include "engine/engine.hpp"

namespace commux {
namespace {

// The engine's share of the configuration: it reads none itself.
engine::Settings engineSettings(const Config& c) {
  engine::Settings s;
  s.progressSpin = c.progressSpin;
  s.waitSpin = c.waitSpin;
  s.handOffDelay = c.handOffDelay;
  s.loopbackOnly = c.loopbackOnly;
  s.maxContexts = c.maxContexts;
  s.failureDetection = c.failureDetection == FailureDetection::Auto
                           ? engine::Settings::FailureDetection::Auto
                       : c.failureDetection == FailureDetection::Ucx
                           ? engine::Settings::FailureDetection::Ucx
                           : engine::Settings::FailureDetection::Off;
  return s;
}

}  // namespace

std::shared_ptr<engine::Engine> processEngine(std::size_t groupSize) {
  return engine::Engine::instance(groupSize, engineSettings(Config::get()));
}

}  // namespace commux
