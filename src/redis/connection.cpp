#include "redis/connection.hpp"

#include "redis/sentinel.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <random>
#include <string_view>
#include "util/asio.hpp"

namespace fg::redis {

using error_code = boost::system::error_code;
using clock = std::chrono::steady_clock;

namespace {

double random01() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

// Keepalive probes after a second idle, three a second apart; data unacknowledged for
// `stall` (5 s at least: below a few retransmission timeouts one lost segment would end
// a healthy connection) ends it (the kernel's defaults are two hours and ~15 minutes).
// Best effort: a refusal leaves the liveness check, which needs none of it.
void watch_in_kernel(int fd, std::chrono::milliseconds stall) {
  const int on = 1, idle = 1, interval = 1, count = 3;
  const unsigned user_timeout = static_cast<unsigned>(std::max<std::int64_t>(stall.count(), 5000));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof user_timeout);
}

reply_kind kind_of(const redisReply* r) {
  if (!r) return reply_kind::lost;
  if (r->type == REDIS_REPLY_ERROR && std::string_view(r->str, r->len).starts_with("NOSCRIPT")) return reply_kind::noscript;
  return reply_kind::other;
}

}  // namespace

connection::connection(asio::any_io_executor ex, config::redis_config cfg, std::string script)
    : ex_(ex), cfg_(std::move(cfg)), script_(std::move(script)), topology_(make_topology(ex, cfg_)), adapter_(ex),
      deadline_timer_(ex), live_(cfg_.ping_interval, config::effective_stall_timeout(cfg_)), live_timer_(ex),
      reconnect_timer_(ex) {}

connection::connection(asio::any_io_executor ex, config::redis_config cfg, std::string script,
                       std::unique_ptr<topology> where)
    : ex_(ex), cfg_(std::move(cfg)), script_(std::move(script)), topology_(std::move(where)), adapter_(ex),
      deadline_timer_(ex), live_(cfg_.ping_interval, config::effective_stall_timeout(cfg_)), live_timer_(ex),
      reconnect_timer_(ex) {
  auto seeds = topology_->seeds();
  if (!seeds.empty()) endpoint_ = seeds.front();
}

connection::~connection() { stop(); }

void connection::start() {
  // The master moved (a sentinel failover): close, and the reconnect goes to the new one.
  topology_->watch([w = weak_from_this()] {
    if (auto self = w.lock()) self->move_on("the sentinels name another master");
  });
  run(fsm_.start());
}

void connection::stop() {
  topology_->stop();
  run(fsm_.stop());
}

void connection::move_on(const char* why) {
  auto* ac = adapter_.context();
  if (!ac) {
    // Waiting to try again (the old master is gone): try the new one now.
    if (fsm_.current() == connect_fsm::state::waiting) {
      reconnect_timer_.cancel();
      run(fsm_.on_timer());
    }
    return;
  }
  spdlog::warn("Redis {}: {}: reconnecting", endpoint_.str(), why);
  // Replies still due come first; then the disconnect callback, and the reconnect.
  redisAsyncDisconnect(ac);
}

void connection::run(const connect_action& a) {
  switch (a.type) {
    case connect_action_type::none:
    case connect_action_type::setup_failed:  // logged where the reply is at hand
      return;
    case connect_action_type::connect:
      connect();
      return;
    case connect_action_type::wait:
      log_lost(a.why);
      topology_->on_lost(endpoint_);
      reconnect_timer_.expires_after(a.delay);
      reconnect_timer_.async_wait([self = shared_from_this()](error_code ec) {
        if (!ec) self->run(self->fsm_.on_timer());
      });
      return;
    case connect_action_type::ready:
      if (a.again) spdlog::info("Redis {}: connected again", endpoint_.str());
      else spdlog::info("Redis {}: connected", endpoint_.str());
      return;
    case connect_action_type::close:
      reconnect_timer_.cancel();
      deadline_timer_.cancel();
      live_timer_.cancel();
      if (auto* ac = adapter_.context()) {
        adapter_.forget();
        // Calls every pending callback with no reply, then the adapter's cleanup.
        redisAsyncFree(ac);
      }
      return;
  }
}

void connection::connect() {
  auto seeds = topology_->seeds();
  if (seeds.empty()) {
    // (sentinel mode: no master known yet; the topology is asking)
    run(fsm_.on_connect_failed("no master known yet", random01()));
    return;
  }
  endpoint_ = std::move(seeds.front());
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(endpoint_.host, ec);
  if (!ec) {
    connect_to(addr.to_string());
    return;
  }
  // A host name: resolve without blocking the worker (hiredis would, in getaddrinfo).
  auto resolver = std::make_shared<asio::ip::tcp::resolver>(ex_);
  resolver->async_resolve(endpoint_.host, std::to_string(endpoint_.port),
                          [self = shared_from_this(), resolver](error_code rec, auto results) {
                            if (self->fsm_.current() != connect_fsm::state::connecting) return;
                            if (rec || results.empty()) {
                              self->run(self->fsm_.on_connect_failed("cannot resolve Redis host", random01()));
                              return;
                            }
                            self->connect_to(results.begin()->endpoint().address().to_string());
                          });
}

void connection::connect_to(const std::string& ip) {
  auto* ac = redisAsyncConnect(ip.c_str(), endpoint_.port);
  if (!ac || ac->err) {
    run(fsm_.on_connect_failed(ac ? ac->errstr : "out of memory", random01()));
    if (ac) redisAsyncFree(ac);
    return;
  }
  ac->data = this;
  // The adapter first, then the callbacks (hiredis may call hooks from them).
  adapter_.attach(ac, weak_from_this());
  redisAsyncSetConnectCallback(ac, &connection::on_connect);
  redisAsyncSetDisconnectCallback(ac, &connection::on_disconnect);
  // The kernel's checks too, well short of its default hours: keepalive probes on an
  // idle connection, and data unacknowledged past the stall timeout ends it.
  watch_in_kernel(ac->c.fd, live_.stall_after());
  answered_ = false;
  subscribing_ = false;
  live_.on_connecting(clock::now());
  arm_liveness();
  queue_setup();
}

void connection::queue_setup() {
  // Queued now, sent first once connected: nothing can overtake them.
  for (auto& c : setup_commands(cfg_, script_.text())) {
    auto step = c.step;
    auto done = post_copy([step](error_code ec, reply r) {
      auto result = ec ? setup_result::no_reply : r.is_error() ? setup_result::error_reply : setup_result::ok;
      auto a = connect_fsm::on_setup_reply(step, result);
      if (a.type == connect_action_type::setup_failed) spdlog::error("Redis {} failed: {}", a.why, r.str);
    });
    submit(format_command(c.args), new pending{std::move(done), clock::now() + cfg_.timeout, command_fsm(), 0, {}});
  }
  if (!sub_channel_.empty()) {
    // Called for the confirmation and every message, until the context is freed (then
    // with no reply): not a pending command.
    redisAsyncCommand(adapter_.context(), &connection::on_message, this, "SUBSCRIBE %b", sub_channel_.data(),
                      sub_channel_.size());
    subscribing_ = true;
  }
  if (topology_->verify_role()) {
    // A sentinel's answer may be stale, or a master may have become a replica: what
    // the server says it is decides.
    auto done = post_copy([w = weak_from_this()](error_code ec, reply r) {
      auto self = w.lock();
      if (!self || ec) return;
      const bool master = r.type == reply::kind::array && !r.elements.empty() && r.elements[0].str == "master";
      if (master) return;
      sentinel_events::not_master.fetch_add(1, std::memory_order_relaxed);
      self->topology_->on_lost(self->endpoint_);
      self->move_on(r.is_error() ? "ROLE failed" : "not a master (ROLE)");
    });
    submit(format_command({"ROLE"}), new pending{std::move(done), clock::now() + cfg_.timeout, command_fsm(), 0, {}});
  }
}

void connection::on_connect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<connection*>(ac->data);
  if (status != REDIS_OK) {
    // hiredis frees the context after this callback.
    self->adapter_.forget();
    self->run(self->fsm_.on_connect_failed(ac->errstr, random01()));
    return;
  }
  self->live_.on_ready(clock::now());
  self->run(self->fsm_.on_connected());
}

void connection::on_disconnect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<connection*>(ac->data);
  self->adapter_.forget();
  const char* why = std::exchange(self->closing_why_, nullptr);
  if (!why) why = status == REDIS_OK ? "closed" : (ac->errstr[0] ? ac->errstr : "connection lost");
  self->run(self->fsm_.on_lost(why, random01()));
}

void connection::on_message(redisAsyncContext*, void* r, void* privdata) {
  auto* self = static_cast<connection*>(privdata);
  auto* rep = static_cast<const redisReply*>(r);
  // ["message", channel, payload]; the confirmation is ["subscribe", channel, count].
  if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 3) return;
  const auto* kind = rep->element[0];
  const auto* payload = rep->element[2];
  if (kind->type != REDIS_REPLY_STRING) return;
  if (std::string_view(kind->str, kind->len) == "subscribe") {
    // The first confirmation, or a probe's (SUBSCRIBE again): the server answers.
    self->subscribing_ = false;
    self->answered();
    return;
  }
  if (std::string_view(kind->str, kind->len) != "message") return;
  if (payload->type != REDIS_REPLY_STRING || !self->on_message_) return;
  self->on_message_(std::string_view(payload->str, payload->len));
}

void connection::log_lost(const char* why) {
  // One line per cause per few seconds, with a count of what was not logged.
  std::uint64_t suppressed = 0;
  if (!error_log_.due(why, clock::now(), suppressed)) return;
  if (suppressed) spdlog::warn("Redis {}: {} ({} more since the last report)", endpoint_.str(), why, suppressed);
  else spdlog::warn("Redis {}: {}", endpoint_.str(), why);
}

void connection::finish(pending* p, error_code ec, const redisReply* r) {
  if (p->done) {
    auto done = std::move(p->done);
    done(ec, r);
  }
}

void connection::fail_later(raw_completion done, error_code ec) {
  if (done) asio::post(ex_, [done = std::move(done), ec] { done(ec, nullptr); });
}

connection::raw_completion connection::post_copy(completion done) const {
  if (!done) return {};
  return [ex = ex_, done = std::move(done)](error_code ec, const redisReply* r) mutable {
    asio::post(ex, [done = std::move(done), ec, r = reply::from(r)]() mutable { done(ec, std::move(r)); });
  };
}

void connection::on_reply(redisAsyncContext* ac, void* r, void* privdata) {
  auto* self = static_cast<connection*>(ac->data);
  auto* p = static_cast<pending*>(privdata);
  // Replies come in order: this is the oldest pending command.
  for (auto it = self->pending_.begin(); it != self->pending_.end(); ++it)
    if (*it == p) {
      self->pending_.erase(it);
      break;
    }
  auto* rep = static_cast<const redisReply*>(r);
  if (rep) self->answered();
  switch (p->fsm.on_reply(kind_of(rep), self->adapter_.context() != nullptr)) {
    case reply_action::deliver:
      self->finish(p, {}, rep);
      break;
    case reply_action::fail_lost:
      self->finish(p, errc::disconnected, nullptr);
      break;
    case reply_action::send_eval: {
      // Flushed, or a new server: EVAL sends the script (and caches it) once.
      auto cmd = self->script_.eval(p->eval_argc, p->eval_args);
      std::string().swap(p->eval_args);
      p->deadline = clock::now() + self->cfg_.timeout;
      self->queue(cmd, p);
      return;
    }
    case reply_action::discard:
      break;
  }
  delete p;
}

bool connection::queue(const std::string& cmd, pending* p) {
  if (!connected()) {
    fail_later(std::move(p->done), errc::not_connected);
    delete p;
    return false;
  }
  return submit(cmd, p);
}

bool connection::submit(const std::string& cmd, pending* p) {
  auto* ac = adapter_.context();
  if (!ac || redisAsyncFormattedCommand(ac, &connection::on_reply, p, cmd.data(), cmd.size()) != REDIS_OK) {
    fail_later(std::move(p->done), errc::not_connected);
    delete p;
    return false;
  }
  live_.on_sent(clock::now(), awaiting());
  pending_.push_back(p);
  arm_deadline_timer();
  return true;
}

void connection::send(const std::vector<std::string>& args, completion done) {
  queue(format_command(args), new pending{post_copy(std::move(done)), clock::now() + cfg_.timeout, command_fsm(), 0, {}});
}

void connection::eval(std::size_t argc, std::string args, raw_completion done) {
  auto cmd = script_.evalsha(argc, args);
  auto* p = new pending{std::move(done), clock::now() + cfg_.timeout, command_fsm(command_fsm::stage::evalsha), argc,
                        std::move(args)};
  queue(cmd, p);
}

void connection::eval_asking(std::size_t argc, std::string args, raw_completion done) {
  if (!connected()) {
    fail_later(std::move(done), errc::not_connected);
    return;
  }
  // Its reply (OK) is of no interest; a lost one fails nothing.
  queue(format_command({"ASKING"}), new pending{{}, clock::now() + cfg_.timeout, command_fsm(), 0, {}});
  eval(argc, std::move(args), std::move(done));
}

void connection::arm_deadline_timer() {
  if (deadline_armed_) return;
  for (auto* p : pending_) {
    if (p->fsm.timed_out()) continue;
    deadline_armed_ = true;
    deadline_timer_.expires_at(p->deadline);
    deadline_timer_.async_wait([self = shared_from_this()](error_code ec) {
      self->deadline_armed_ = false;
      if (ec) return;
      auto now = clock::now();
      for (auto* q : self->pending_) {
        if (q->fsm.timed_out()) continue;
        if (q->deadline > now) break;
        // The reply may still come: it is discarded then (the command may have run).
        if (q->fsm.on_deadline()) self->finish(q, errc::timeout, nullptr);
      }
      self->arm_deadline_timer();
    });
    return;
  }
}

void connection::answered() {
  // A connect alone proves little (a hung server's kernel still accepts): only an
  // answer ends the backoff, so that connections to a server that answers nothing
  // come ever less often.
  if (std::exchange(answered_, true)) return;
  fsm_.on_answered();
}

void connection::arm_liveness() {
  if (live_armed_) return;
  live_armed_ = true;
  live_timer_.expires_after(live_.period());
  live_timer_.async_wait([w = weak_from_this()](error_code ec) {
    auto self = w.lock();
    if (!self) return;
    self->live_armed_ = false;
    if (!ec) self->on_live_tick();
  });
}

void connection::on_live_tick() {
  // Waiting to reconnect, or stopped: the next connect arms it again.
  if (!adapter_.context()) return;
  const auto now = clock::now();
  live_.on_input(adapter_.last_input());
  switch (live_.on_tick(now, awaiting())) {
    case liveness::action::none:
      break;
    case liveness::action::probe:
      probe();
      break;
    case liveness::action::close:
      close_stalled(now);
      return;
  }
  arm_liveness();
}

void connection::probe() {
  auto* ac = adapter_.context();
  if (!ac || !fsm_.ready()) return;
  if (sub_channel_.empty()) {
    // Its reply is of no interest: that one comes is the point.
    queue(format_command({"PING"}), new pending{{}, clock::now() + cfg_.timeout, command_fsm(), 0, {}});
    return;
  }
  // A RESP2 subscriber can take no PING that hiredis 0.14 would match to a callback;
  // subscribing again to the same channel is answered with a confirmation (on_message).
  if (redisAsyncCommand(ac, &connection::on_message, this, "SUBSCRIBE %b", sub_channel_.data(), sub_channel_.size()) ==
      REDIS_OK) {
    live_.on_sent(clock::now(), awaiting());
    subscribing_ = true;
  }
}

void connection::close_stalled(clock::time_point now) {
  auto* ac = adapter_.context();
  const bool connecting = !(ac->c.flags & REDIS_CONNECTED);
  const auto quiet_ms = std::chrono::duration_cast<std::chrono::milliseconds>(live_.quiet(now)).count();
  if (connecting) {
    connection_events::connect_timeouts.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("Redis {}: connect not done after {} ms: closing it, connecting again", endpoint_.str(), quiet_ms);
  } else {
    connection_events::stalled.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("Redis {}: no reply for {} ms with {} command(s) waiting (redis.stall_timeout {} ms): closing the "
                 "connection, connecting again",
                 endpoint_.str(), quiet_ms, pending_.size() + subscribing_, live_.stall_after().count());
  }
  closing_why_ = connecting ? "connect timed out" : "stalled: no reply";
  // Forgotten first: what the freeing fails may send again, and must find no context.
  adapter_.forget();
  // Fails every pending command (no reply); a connected context's disconnect callback
  // then schedules the reconnect.
  redisAsyncFree(ac);
  if (fsm_.current() == connect_fsm::state::connecting)
    run(fsm_.on_connect_failed(std::exchange(closing_why_, nullptr), random01()));
  closing_why_ = nullptr;
}

asio::awaitable<std::pair<error_code, reply>> connection::command(std::vector<std::string> args) {
  auto self = shared_from_this();
  auto init = [self, &args](auto handler) {
    auto h = std::make_shared<decltype(handler)>(std::move(handler));
    self->send(args, [h](error_code ec, reply r) { (*h)(std::pair<error_code, reply>(ec, std::move(r))); });
  };
  auto result = co_await asio::async_initiate<decltype(asio::use_awaitable), void(std::pair<error_code, reply>)>(
      init, asio::use_awaitable);
  co_return result;
}

}  // namespace fg::redis
