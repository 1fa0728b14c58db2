#pragma once
// What an operation is ("send to rank 3 (tag 7, 8 bytes)", "allreduce (SUM, 2 x Float,
// shared memory, collective #5)"), for error messages. It keeps the parts and formats the
// text only when a message needs it: formatting it for every call was five or more heap
// allocations, a visible share of an 8-byte send (docs/performance.md).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace commux::engine {

class Description {
 public:
  Description() = default;
  /// Text formatted already (rare operations, tests).
  explicit Description(std::string text) : form_(Form::Text), detail_(std::move(text)) {}

  /// "<verb> <preposition> rank <peer> (tag T, B bytes[ in N tensors])"; peer < 0 reads
  /// "any rank". `verb` and `preposition` must outlive the description (literals).
  static Description p2p(const char* verb, const char* preposition, int peer, int tag,
                         std::uint64_t bytes, std::size_t tensors);
  /// "<name> ([detail, ]count x dtype[ x N tensors], <algorithm>, collective #seq)", the
  /// count and dtype those of the first tensor (none when `tensors` is 0). `name`, `dtype`
  /// (the front end's name of the element type, "Float") and `algorithm` must outlive the
  /// description (literals).
  static Description collective(const char* name, std::string detail, std::size_t tensors,
                                std::int64_t count, const char* dtype, const char* algorithm,
                                std::uint32_t seq);

  std::string str() const;
  /// A collective's number in its group (the "#seq" above); absent for anything else.
  std::optional<std::uint32_t> sequence() const {
    return form_ == Form::Collective ? std::optional<std::uint32_t>(seq_) : std::nullopt;
  }

 private:
  enum class Form : std::uint8_t { Empty, Text, P2P, Collective };
  Form form_ = Form::Empty;
  const char* name_ = "";
  const char* word_ = "";  // the preposition, or the algorithm
  int peer_ = -1;          // p2p; also the tag below
  int tag_ = 0;
  std::uint32_t seq_ = 0;
  std::int64_t count_ = 0;  // bytes (p2p), elements of the first tensor (collective)
  std::size_t tensors_ = 0;
  const char* dtype_ = "";
  std::string detail_;  // the text itself (Text); the reduction, the root (collective)
};

}  // namespace commux::engine
