#include "redis/slots.hpp"

#include <array>

namespace fg::redis {

namespace {

constexpr std::uint16_t polynomial = 0x1021;

// Entry b: the CRC register after shifting byte b through an empty register, MSB first.
constexpr std::array<std::uint16_t, 256> make_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned b = 0; b < 256; ++b) {
    unsigned crc = b << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) ? (crc << 1) ^ polynomial : crc << 1;
    table[b] = static_cast<std::uint16_t>(crc);
  }
  return table;
}

constexpr auto table = make_table();
static_assert(table[1] == polynomial && table[255] == 0x1ef0);

}  // namespace

std::uint16_t crc16(std::string_view data) {
  std::uint16_t crc = 0;
  for (unsigned char c : data) crc = static_cast<std::uint16_t>((crc << 8) ^ table[((crc >> 8) ^ c) & 0xff]);
  return crc;
}

std::string_view hash_tag(std::string_view key) {
  auto open = key.find('{');
  if (open == std::string_view::npos) return key;
  auto close = key.find('}', open + 1);
  // "{}" (nothing between) or no closing brace: the whole key is hashed.
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

std::uint16_t key_slot(std::string_view key) {
  // slot_count is a power of two: the modulo is a mask.
  return static_cast<std::uint16_t>(crc16(hash_tag(key)) & (slot_count - 1));
}

}  // namespace fg::redis
