#pragma once
#include <cstddef>
#include <memory>
#include <vector>

namespace fg::util {

// Blocks of one size, lent and given back on one thread: a buffer that a connection
// needs only while it moves bytes is lent for that time, so idle connections hold
// none, and a busy worker reuses the same few blocks instead of allocating. At most
// `keep` free blocks are kept; the rest go back to the allocator.
class block_pool {
 public:
  block_pool(std::size_t block_size, std::size_t keep) : size_(block_size), keep_(keep) {}
  block_pool(const block_pool&) = delete;
  block_pool& operator=(const block_pool&) = delete;

  std::unique_ptr<char[]> take() {
    if (free_.empty()) return std::make_unique_for_overwrite<char[]>(size_);
    auto b = std::move(free_.back());
    free_.pop_back();
    return b;
  }
  void give(std::unique_ptr<char[]> b) {
    if (b && free_.size() < keep_) free_.push_back(std::move(b));
  }
  std::size_t block_size() const { return size_; }
  std::size_t free_blocks() const { return free_.size(); }

 private:
  std::size_t size_, keep_;
  std::vector<std::unique_ptr<char[]>> free_;
};

}  // namespace fg::util
