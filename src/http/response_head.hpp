#pragma once
#include <boost/beast/http/field.hpp>
#include <boost/container/small_vector.hpp>

#include <cstdint>
#include <cstring>
#include <string_view>

#include "util/text.hpp"

namespace fg::http {

// An upstream response's status line and fields, as its parser met them: their text in
// one buffer and, per field, where its name and value are in it. Beast's own container
// (basic_fields) allocated a node per field and kept them in an ordered set, about a
// sixth of a plain request's user-space instructions; a response head of usual size fits
// in this one's inline storage and allocates nothing. Fields keep the upstream's order.
class response_head {
  struct entry {
    boost::beast::http::field id;
    std::uint32_t name_at, name_size, value_at, value_size;
  };

 public:
  // One field, as Beast's fields show theirs (name(), name_string(), value()).
  class field_ref {
   public:
    boost::beast::http::field name() const { return id_; }
    std::string_view name_string() const { return name_; }
    std::string_view value() const { return value_; }
    // The field as it goes out: its name, ": ", its value and CRLF (so the head keeps it).
    // Two fields in a row are adjacent in the head: a run of them is one piece of text.
    std::string_view line() const { return {name_.data(), name_.size() + value_.size() + 4}; }

   private:
    friend class response_head;
    field_ref(boost::beast::http::field id, std::string_view name, std::string_view value)
        : id_(id), name_(name), value_(value) {}
    boost::beast::http::field id_;
    std::string_view name_, value_;
  };

  class iterator {
   public:
    field_ref operator*() const { return head_->at(*e_); }
    iterator& operator++() {
      ++e_;
      return *this;
    }
    bool operator==(const iterator& o) const { return e_ == o.e_; }

   private:
    friend class response_head;
    iterator(const response_head* h, const entry* e) : head_(h), e_(e) {}
    const response_head* head_;
    const entry* e_;
  };

  unsigned result_int() const { return status_; }
  unsigned version() const { return version_; }
  std::string_view reason() const { return {text_.data(), reason_size_}; }
  iterator begin() const { return {this, fields_.data()}; }
  iterator end() const { return {this, fields_.data() + fields_.size()}; }
  std::size_t size() const { return fields_.size(); }

  // The first value of a field, or empty.
  std::string_view operator[](boost::beast::http::field id) const {
    for (const auto& e : fields_)
      if (e.id == id) return at(e).value();
    return {};
  }
  // The same by name, compared without regard to case.
  std::string_view operator[](std::string_view name) const {
    for (const auto& e : fields_)
      if (util::iequals(at(e).name_string(), name)) return at(e).value();
    return {};
  }

  // What the parser calls: the status line, then each field in order.
  void start(unsigned status, unsigned version, std::string_view reason) {
    text_.clear();
    fields_.clear();
    status_ = status;
    version_ = version;
    text_.resize(reason.size(), boost::container::default_init);
    if (!reason.empty()) std::memcpy(text_.data(), reason.data(), reason.size());
    reason_size_ = reason.size();
  }
  void add(boost::beast::http::field id, std::string_view name, std::string_view value) {
    // (as the field goes out, "name: value\r\n": see field_ref::line)
    const auto at = text_.size();
    text_.resize(at + name.size() + value.size() + 4, boost::container::default_init);
    util::put(util::put(util::put(util::put(text_.data() + at, name), ": "), value), "\r\n");
    const auto name_at = static_cast<std::uint32_t>(at);
    fields_.push_back({id, name_at, static_cast<std::uint32_t>(name.size()),
                       name_at + static_cast<std::uint32_t>(name.size()) + 2, static_cast<std::uint32_t>(value.size())});
  }

 private:
  field_ref at(const entry& e) const {
    return {e.id, {text_.data() + e.name_at, e.name_size}, {text_.data() + e.value_at, e.value_size}};
  }
  // (a head is at most the parser's header_limit, 64 KiB: offsets fit in 32 bits)
  boost::container::small_vector<char, 512> text_;
  boost::container::small_vector<entry, 16> fields_;
  std::size_t reason_size_ = 0;
  unsigned status_ = 0;
  unsigned version_ = 11;
};

}  // namespace fg::http
