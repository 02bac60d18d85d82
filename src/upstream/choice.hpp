#pragma once
#include <array>
#include <cstddef>
#include <optional>

#include "config/config.hpp"
#include "upstream/servers.hpp"

namespace fg::upstream {

class pool;

// The server of one request, and of each try after a failure: chosen by the upstream's
// balance, held as a request in flight on it (least_conn, the retry budget) until the
// request ends, and told what each try came to (passive health). A session keeps one
// and reuses it from request to request.
class choice {
 public:
  choice() = default;
  ~choice() { end(); }
  choice(const choice&) = delete;
  choice& operator=(const choice&) = delete;

  // The first server for a request to `cfg` (servers: the request's snapshot's).
  void begin(pool& p, const config::upstream_config& cfg, const upstream_servers& servers,
             std::optional<std::uint64_t> key_hash, steady::time_point now);
  // Releases what the request holds (its place in flight, a retry's place in the budget).
  void end();

  std::size_t server() const { return server_; }
  // Whether the upstream has no server at all (every server given by a name that has
  // not resolved yet): connecting to server() then fails, as to no address.
  bool none() const { return servers_->servers.empty(); }
  const std::string& address() const;

  // A try that failed on this server with nothing the client saw: counted against it
  // (the first failure of a request only).
  void failed(failure_kind why, steady::time_point now);
  // A response head came: a status in eject.statuses counts as a failure, any other as
  // a success; a retry's place in the budget is given back. Status 0: the head came and
  // its verdict comes later (a gRPC call's, from its trailers), by a second call.
  void answered(unsigned status, steady::time_point now);
  // Moves to another server for a retry: false when the upstream's `retries` are spent,
  // its retry budget is full, or every server has been tried.
  bool retry(steady::time_point now);

 private:
  void hold(std::size_t i);

  pool* pool_ = nullptr;
  const config::upstream_config* cfg_ = nullptr;
  const upstream_servers* servers_ = nullptr;
  std::optional<std::uint64_t> key_hash_;
  std::size_t server_ = 0;
  bool holding_ = false;
  bool retrying_ = false;
  bool counted_ = false;  // a failure of this request was counted against a server
  unsigned retries_left_ = 0;
  std::array<std::size_t, 8> tried_{};  // retries are at most 5 (the loader's cap)
  std::size_t tried_count_ = 0;
};

}  // namespace fg::upstream
