#pragma once
// The process's engine, configured from the environment (commux::Config): the engine reads
// no settings itself, so everything above it gets it here.
#include <cstddef>
#include <memory>

namespace commux {
namespace engine {
class Engine;
}

/// The process-wide engine (engine::Engine::instance) with the settings of the
/// environment; `groupSize` as there.
std::shared_ptr<engine::Engine> processEngine(std::size_t groupSize = 0);

}  // namespace commux
