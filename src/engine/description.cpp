#include "engine/description.hpp"

namespace commux::engine {

Description Description::p2p(const char* verb, const char* preposition, int peer, int tag,
                             std::uint64_t bytes, std::size_t tensors) {
  Description d;
  d.form_ = Form::P2P;
  d.name_ = verb;
  d.word_ = preposition;
  d.peer_ = peer;
  d.tag_ = tag;
  d.count_ = static_cast<std::int64_t>(bytes);
  d.tensors_ = tensors;
  return d;
}

Description Description::collective(const char* name, std::string detail, std::size_t tensors,
                                    std::int64_t count, const char* dtype, const char* algorithm,
                                    std::uint32_t seq) {
  Description d;
  d.form_ = Form::Collective;
  d.name_ = name;
  d.word_ = algorithm;
  d.seq_ = seq;
  d.count_ = count;
  d.tensors_ = tensors;
  d.dtype_ = dtype;
  d.detail_ = std::move(detail);
  return d;
}

std::string Description::str() const {
  std::string s;
  switch (form_) {
    case Form::Empty:
      return "operation";
    case Form::Text:
      return detail_;
    case Form::P2P:
      s = std::string(name_) + " " + word_ + " " +
          (peer_ < 0 ? std::string("any rank") : "rank " + std::to_string(peer_)) + " (tag " +
          std::to_string(tag_) + ", " + std::to_string(count_) + " bytes";
      if (tensors_ > 1) s += " in " + std::to_string(tensors_) + " tensors";
      return s + ")";
    case Form::Collective:
      s = std::string(name_) + " (";
      if (!detail_.empty()) s += detail_ + ", ";
      if (tensors_ > 0) {
        s += std::to_string(count_) + " x " + dtype_;
        if (tensors_ > 1) s += " x " + std::to_string(tensors_) + " tensors";
        s += ", ";
      }
      return s + word_ + ", collective #" + std::to_string(seq_) + ")";
  }
  return s;
}

}  // namespace commux::engine
