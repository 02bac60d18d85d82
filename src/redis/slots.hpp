#pragma once
#include <cstdint>
#include <string_view>

namespace fg::redis {

// Redis Cluster's key space: every key belongs to one of these slots.
inline constexpr std::uint16_t slot_count = 16384;

// CRC-16/XMODEM (poly 0x1021, init 0, no reflection, no final xor): Redis Cluster's
// hash (the cluster spec, appendix A; "123456789" gives 0x31C3).
std::uint16_t crc16(std::string_view data);

// The part of `key` that is hashed: the text between the first '{' and the first '}'
// after it when that text is non-empty, otherwise the whole key.
std::string_view hash_tag(std::string_view key);

// The slot Redis Cluster stores `key` in (what CLUSTER KEYSLOT answers).
std::uint16_t key_slot(std::string_view key);

}  // namespace fg::redis
