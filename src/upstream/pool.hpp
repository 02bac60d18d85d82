#pragma once
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include <string>
#include <string_view>
#include <unordered_map>

#include "config/config.hpp"
#include "deadline/board.hpp"
#include "tls/client_context.hpp"
#include "upstream/connection.hpp"
#include "upstream/servers.hpp"

namespace fg::upstream {

class h2_session;
// An HTTP/2 connection the pool offers; let go (dropped, or its upstream gone with a
// reload), it ends once its last stream has.
struct h2_pooled {
  std::shared_ptr<h2_session> s;
  explicit h2_pooled(std::shared_ptr<h2_session> p) : s(std::move(p)) {}
  h2_pooled(h2_pooled&&) noexcept = default;
  h2_pooled& operator=(h2_pooled&& o) noexcept;
  ~h2_pooled();
};

// Per-worker pools of keep-alive connections, one per server of each upstream, by
// upstream name and server address (a reload that keeps a server keeps its idle
// connections; one that removes it drops them). The worker's round-robin position in
// each upstream is kept here too (pick). Not thread-safe: it belongs to one worker's event loop. The connection
// handed out is registered as the deadline entry's `upstream`, so the session's
// deadline covers it.
class pool {
 public:
  explicit pool(boost::asio::any_io_executor ex) : ex_(std::move(ex)) {}

  // Replaces the upstream set (on start and reload); idle connections to changed
  // upstreams are dropped.
  void configure(const std::vector<config::upstream_config>& upstreams);

  // The server of `upstream` for a request's next try (upstream::pick with this worker's
  // round-robin position).
  std::optional<std::size_t> pick(const config::upstream_config& upstream, const upstream_servers& servers,
                                  const pick_input& in);
  // An idle connection to `server` (its index in upstream.servers) if one is alive, else
  // null (then connect()).
  connection_ptr take_idle(const config::upstream_config& upstream, deadline::entry& watch, std::size_t server = 0);
  // A fresh connection to `server` as the request's configuration has it, never from
  // the idle list (connect_timeout applies, to the TLS handshake too where `tls` is
  // given: the server's last session resumed). After a reload that removed the upstream
  // or the server, still there (such a connection is never pooled).
  boost::asio::awaitable<connection_ptr> connect(const config::upstream_config& upstream, deadline::entry& watch,
                                                 boost::system::error_code& ec, std::size_t server = 0,
                                                 const tls::client_context* tls = nullptr);
  // Return a connection whose last exchange completed cleanly.
  void release(std::string_view upstream, connection_ptr c);

  // HTTP/2 upstreams (protocol: h2): a connection to `server` that takes another stream,
  // else null (then connect(), and add_h2 the session made on it).
  std::shared_ptr<h2_session> take_h2(const config::upstream_config& upstream, std::size_t server);
  // Kept for the requests that follow (at most max_idle per server, at least one); false:
  // not kept (a reload moved the server, or enough are kept): the caller's only.
  bool add_h2(const config::upstream_config& upstream, std::size_t server, const std::shared_ptr<h2_session>& s);

  void close_idle();
  // Closes the connections idle for the upstream's idle_timeout or longer (the sweeper's).
  void close_expired(std::chrono::steady_clock::time_point now);
  std::size_t idle_count(std::string_view upstream) const;
  // Idle connections of all upstreams; readable from any thread (for the metrics).
  std::size_t idle_total() const { return idle_total_.load(std::memory_order_relaxed); }

 private:
  struct server_slot {
    config::endpoint address;
    std::vector<connection_ptr> idle;
    // New whenever a server comes (or comes back) into the upstream: a connection made
    // to an older one is not taken back (a request of an older config snapshot may
    // still hold one).
    std::uint64_t address_id = 0;
    // The TLS session the server gave last (resumed by the next connection to it).
    tls::session_ptr session;
    // protocol: h2: its connections, each carrying many streams.
    std::vector<h2_pooled> h2;
  };
  struct slot {
    config::upstream_config cfg;
    std::vector<server_slot> servers;  // as cfg.servers
    pick_state picks;
  };
  struct name_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  slot* find(std::string_view name);
  // The slot's server `i` if it is the one `want` names at i (else null: moved by a reload).
  server_slot* find(std::string_view name, const config::upstream_config& want, std::size_t i);
  // The slot found last (most requests go to one upstream): no hashing for it.
  std::pair<const std::string, slot>* last_ = nullptr;
  boost::asio::any_io_executor ex_;
  std::uint64_t next_address_id_ = 0;
  void count_idle();
  std::atomic<std::size_t> idle_total_{0};
  // Nodes stay put while others come and go: a slot outlives a connect's awaits unless
  // a reload removes its upstream.
  std::unordered_map<std::string, slot, name_hash, std::equal_to<>> slots_;
};

}  // namespace fg::upstream
