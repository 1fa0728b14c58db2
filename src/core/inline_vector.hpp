#pragma once
// A vector that keeps its first N elements inside itself: an operation usually has one
// buffer and one or two requests in flight, and the hot path should not allocate for them.
// It moves everything to the heap once it outgrows N. (c10::SmallVector did this before the
// core left torch; nothing in the standard library does.)
#include <array>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace commux::core {

template <typename T, std::size_t N>
class InlineVector {
  static_assert(N > 0, "an InlineVector keeps at least one element inline");

 public:
  InlineVector() = default;
  InlineVector(const InlineVector&) = default;
  InlineVector& operator=(const InlineVector&) = default;
  // A moved-from vector is empty (the default move would keep its size).
  InlineVector(InlineVector&& other) noexcept(std::is_nothrow_move_constructible_v<T>)
      : inline_(std::move(other.inline_)),
        heap_(std::move(other.heap_)),
        size_(other.size_),
        onHeap_(other.onHeap_) {
    other.clear();
  }
  InlineVector& operator=(InlineVector&& other) noexcept(std::is_nothrow_move_assignable_v<T>) {
    if (this != &other) {
      inline_ = std::move(other.inline_);
      heap_ = std::move(other.heap_);
      size_ = other.size_;
      onHeap_ = other.onHeap_;
      other.clear();
    }
    return *this;
  }

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T* data() noexcept { return onHeap_ ? heap_.data() : inline_.data(); }
  const T* data() const noexcept { return onHeap_ ? heap_.data() : inline_.data(); }
  T* begin() noexcept { return data(); }
  T* end() noexcept { return data() + size_; }
  const T* begin() const noexcept { return data(); }
  const T* end() const noexcept { return data() + size_; }
  T& operator[](std::size_t i) noexcept { return data()[i]; }
  const T& operator[](std::size_t i) const noexcept { return data()[i]; }
  T& front() noexcept { return data()[0]; }
  const T& front() const noexcept { return data()[0]; }

  /// Empties it, back to its inline elements.
  void clear() noexcept {
    heap_.clear();
    for (std::size_t i = 0; i < N; ++i) inline_[i] = T();
    size_ = 0;
    onHeap_ = false;
  }

  void reserve(std::size_t capacity) {
    if (capacity > N) spill(capacity);
  }

  void push_back(T value) {
    if (!onHeap_ && size_ < N) {
      inline_[size_++] = std::move(value);
      return;
    }
    // Once on the heap the vector grows geometrically: reserving size + 1 on every push
    // made n pushes cost n reallocations (a packed message of many pieces).
    if (!onHeap_) spill(2 * N + 2);
    heap_.push_back(std::move(value));
    ++size_;
  }

  /// Grows with copies of `value`, or drops the last elements.
  void resize(std::size_t count, const T& value) {
    if (count > N) spill(count);
    if (onHeap_) {
      heap_.resize(count, value);
    } else {
      for (std::size_t i = size_; i < count; ++i) inline_[i] = value;
      for (std::size_t i = count; i < size_; ++i) inline_[i] = T();
    }
    size_ = count;
  }

 private:
  void spill(std::size_t capacity) {
    if (onHeap_) {
      heap_.reserve(capacity);
      return;
    }
    heap_.reserve(capacity);
    for (std::size_t i = 0; i < size_; ++i) heap_.push_back(std::move(inline_[i]));
    for (std::size_t i = 0; i < size_; ++i) inline_[i] = T();  // release what they held
    onHeap_ = true;
  }

  std::array<T, N> inline_{};
  std::vector<T> heap_;
  std::size_t size_ = 0;
  bool onHeap_ = false;
};

}  // namespace commux::core
