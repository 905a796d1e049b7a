// One tag's queue in a match table (posted receives, or messages that arrived first): FIFO,
// with the first entry inline, because collectives use each tag once, so posting and matching
// allocate nothing, and O(1) amortised at the front however deep a tag's queue grows (point-to-
// point tags repeat). Not thread-safe (the match table's owner guards it).
#ifndef CHORUS_TRANSPORT_MATCHING_TAG_QUEUE_H_
#define CHORUS_TRANSPORT_MATCHING_TAG_QUEUE_H_

#include <cstddef>
#include <utility>

#include "absl/container/inlined_vector.h"

namespace chorus::matching {

template <typename T>
class TagQueue {
 public:
  using iterator = typename absl::InlinedVector<T, 1>::iterator;

  bool empty() const { return head_ == items_.size(); }
  size_t size() const { return items_.size() - head_; }
  T& front() { return items_[head_]; }
  void push_back(T value) { items_.push_back(std::move(value)); }
  // Removes the front entry and returns it.
  T pop_front() {
    T value = std::move(items_[head_]);
    ++head_;
    Compact();
    return value;
  }

  iterator begin() { return items_.begin() + static_cast<std::ptrdiff_t>(head_); }
  iterator end() { return items_.end(); }
  // Removes [first, last), entries from begin() on; for the rare removals from the middle
  // (a cancelled receive, a withdrawn message).
  void erase(iterator first, iterator last) {
    items_.erase(first, last);
    Compact();
  }
  void erase(iterator position) { erase(position, position + 1); }

 private:
  // Taken entries are dropped once all are taken, or once they are at least half of the
  // storage, so the storage stays within twice the queue's length.
  void Compact() {
    if (head_ == items_.size()) {
      items_.clear();
      head_ = 0;
    } else if (head_ >= 16 && 2 * head_ >= items_.size()) {
      items_.erase(items_.begin(), begin());
      head_ = 0;
    }
  }

  absl::InlinedVector<T, 1> items_;
  size_t head_ = 0;  // entries before it were taken
};

}  // namespace chorus::matching

#endif  // CHORUS_TRANSPORT_MATCHING_TAG_QUEUE_H_
