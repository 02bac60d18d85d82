#include "redis/connection.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/uuid/detail/sha1.hpp>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <random>

namespace fg::redis {

namespace asio = boost::asio;
using error_code = boost::system::error_code;
using clock = std::chrono::steady_clock;

namespace {

class redis_category : public boost::system::error_category {
 public:
  const char* name() const noexcept override { return "floodgate.redis"; }
  std::string message(int ev) const override {
    switch (static_cast<errc>(ev)) {
      case errc::not_connected: return "not connected to Redis";
      case errc::timeout: return "Redis command timed out";
      case errc::disconnected: return "Redis connection lost";
      case errc::protocol: return "unexpected Redis reply";
    }
    return "unknown";
  }
};

std::string sha1_hex(const std::string& s) {
  boost::uuids::detail::sha1 h;
  h.process_bytes(s.data(), s.size());
  boost::uuids::detail::sha1::digest_type d;
  h.get_digest(d);
  char out[41];
  for (int i = 0; i < 5; ++i) std::snprintf(out + i * 8, 9, "%08x", d[i]);
  return std::string(out, 40);
}

double random01() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

}  // namespace

const boost::system::error_category& category() {
  static redis_category c;
  return c;
}

connection::connection(asio::any_io_executor ex, config::redis_config cfg, std::string script)
    : ex_(ex), cfg_(std::move(cfg)), script_(std::move(script)), sha_(sha1_hex(script_)), sd_(ex),
      deadline_timer_(ex), reconnect_timer_(ex) {}

connection::~connection() { stop(); }

void connection::start() { connect(); }

void connection::stop() {
  if (stopped_) return;
  stopped_ = true;
  reconnect_timer_.cancel();
  deadline_timer_.cancel();
  if (ac_) {
    auto* ac = ac_;
    ac_ = nullptr;
    ready_ = false;
    // Calls every pending callback with no reply, then cleanup().
    redisAsyncFree(ac);
  }
}

void connection::connect() {
  if (stopped_ || cfg_.addresses.empty()) return;
  const auto& ep = cfg_.addresses.front();
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(ep.host, ec);
  if (!ec) {
    connect_to(addr.to_string());
    return;
  }
  // A host name: resolve without blocking the worker (hiredis would, in getaddrinfo).
  auto resolver = std::make_shared<asio::ip::tcp::resolver>(ex_);
  resolver->async_resolve(ep.host, std::to_string(ep.port),
                          [self = shared_from_this(), resolver](error_code rec, auto results) {
                            if (self->stopped_) return;
                            if (rec || results.empty()) {
                              self->lost("cannot resolve Redis host");
                              self->schedule_reconnect();
                              return;
                            }
                            self->connect_to(results.begin()->endpoint().address().to_string());
                          });
}

void connection::connect_to(const std::string& ip) {
  auto* ac = redisAsyncConnect(ip.c_str(), cfg_.addresses.front().port);
  if (!ac || ac->err) {
    lost(ac ? ac->errstr : "out of memory");
    if (ac) redisAsyncFree(ac);
    schedule_reconnect();
    return;
  }
  ac_ = ac;
  ac_->data = this;
  // The adapter first, then the callbacks (hiredis may call hooks from them).
  ac_->ev.data = this;
  ac_->ev.addRead = &connection::add_read;
  ac_->ev.delRead = &connection::del_read;
  ac_->ev.addWrite = &connection::add_write;
  ac_->ev.delWrite = &connection::del_write;
  ac_->ev.cleanup = &connection::cleanup;
  boost::system::error_code ec;
  sd_.assign(ac_->c.fd, ec);
  redisAsyncSetConnectCallback(ac_, &connection::on_connect);
  redisAsyncSetDisconnectCallback(ac_, &connection::on_disconnect);
  // Queued now, sent first once connected: nothing can overtake them.
  ready_ = true;
  auto log_error = [](const char* what) {
    return [what](error_code ec, reply r) {
      if (ec) return;
      if (r.is_error()) spdlog::error("Redis {} failed: {}", what, r.str);
    };
  };
  if (!cfg_.password.empty()) {
    if (cfg_.username.empty()) send({"AUTH", cfg_.password}, log_error("AUTH"));
    else send({"AUTH", cfg_.username, cfg_.password}, log_error("AUTH"));
  }
  if (cfg_.database != 0) send({"SELECT", std::to_string(cfg_.database)}, log_error("SELECT"));
  send({"SCRIPT", "LOAD", script_}, log_error("SCRIPT LOAD"));
  ready_ = false;  // user commands wait for the connect callback
}

void connection::on_connect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<connection*>(ac->data);
  if (status != REDIS_OK) {
    // hiredis frees the context after this callback.
    self->ac_ = nullptr;
    self->ready_ = false;
    self->lost(ac->errstr);
    self->schedule_reconnect();
    return;
  }
  self->ready_ = true;
  if (self->backoff_.attempts() > 0) spdlog::info("Redis {}: connected again", self->cfg_.addresses.front().str());
  else spdlog::info("Redis {}: connected", self->cfg_.addresses.front().str());
  self->backoff_.reset();
}

void connection::on_disconnect(const redisAsyncContext* ac, int status) {
  auto* self = static_cast<connection*>(ac->data);
  self->ac_ = nullptr;
  self->ready_ = false;
  if (self->stopped_) return;
  self->lost(status == REDIS_OK ? "closed" : (ac->errstr[0] ? ac->errstr : "connection lost"));
  self->schedule_reconnect();
}

void connection::lost(const char* why) {
  // One line per few seconds, with a count of what was not logged.
  auto now = clock::now();
  if (now - last_error_log_ < std::chrono::seconds(5)) {
    ++suppressed_errors_;
    return;
  }
  if (suppressed_errors_) spdlog::warn("Redis {}: {} ({} more since the last report)", cfg_.addresses.front().str(), why, suppressed_errors_);
  else spdlog::warn("Redis {}: {}", cfg_.addresses.front().str(), why);
  last_error_log_ = now;
  suppressed_errors_ = 0;
}

void connection::schedule_reconnect() {
  if (stopped_) return;
  auto delay = backoff_.next(random01());
  reconnect_timer_.expires_after(delay);
  reconnect_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (!ec && !self->stopped_ && !self->ac_) self->connect();
  });
}

void connection::add_read(void* p) {
  auto* self = static_cast<connection*>(p);
  self->want_read_ = true;
  self->wait_read();
}
void connection::del_read(void* p) { static_cast<connection*>(p)->want_read_ = false; }
void connection::add_write(void* p) {
  auto* self = static_cast<connection*>(p);
  self->want_write_ = true;
  self->wait_write();
}
void connection::del_write(void* p) { static_cast<connection*>(p)->want_write_ = false; }

void connection::cleanup(void* p) {
  auto* self = static_cast<connection*>(p);
  self->want_read_ = self->want_write_ = false;
  if (self->sd_.is_open()) {
    boost::system::error_code ec;
    self->sd_.cancel(ec);
    // hiredis closes the descriptor itself.
    self->sd_.release();
  }
}

void connection::wait_read() {
  if (reading_ || !want_read_ || !sd_.is_open()) return;
  reading_ = true;
  sd_.async_wait(asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](error_code ec) {
    self->reading_ = false;
    if (ec || !self->ac_) return;
    if (self->want_read_) redisAsyncHandleRead(self->ac_);
    self->wait_read();
  });
}

void connection::wait_write() {
  if (writing_ || !want_write_ || !sd_.is_open()) return;
  writing_ = true;
  sd_.async_wait(asio::posix::stream_descriptor::wait_write, [self = shared_from_this()](error_code ec) {
    self->writing_ = false;
    if (ec || !self->ac_) return;
    if (self->want_write_) redisAsyncHandleWrite(self->ac_);
    self->wait_write();
  });
}

void connection::finish(pending* p, error_code ec, reply r) {
  p->finished = true;
  if (!p->done) return;
  asio::post(ex_, [done = std::move(p->done), ec, r = std::move(r)]() mutable { done(ec, std::move(r)); });
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
  if (!p->finished) {
    if (r) self->finish(p, {}, reply::from(static_cast<redisReply*>(r)));
    else self->finish(p, errc::disconnected, {});
  }
  delete p;
}

void connection::send(const std::vector<std::string>& args, completion done) {
  if (!ac_ || !ready_) {
    if (done) asio::post(ex_, [done = std::move(done)] { done(errc::not_connected, {}); });
    return;
  }
  std::vector<const char*> argv;
  std::vector<std::size_t> lens;
  argv.reserve(args.size());
  lens.reserve(args.size());
  for (const auto& a : args) argv.push_back(a.data()), lens.push_back(a.size());
  auto* p = new pending{std::move(done), clock::now() + cfg_.timeout};
  if (redisAsyncCommandArgv(ac_, &connection::on_reply, p, static_cast<int>(args.size()), argv.data(), lens.data()) !=
      REDIS_OK) {
    if (p->done) asio::post(ex_, [done = std::move(p->done)] { done(errc::not_connected, {}); });
    delete p;
    return;
  }
  pending_.push_back(p);
  arm_deadline_timer();
}

void connection::arm_deadline_timer() {
  if (deadline_armed_) return;
  for (auto* p : pending_) {
    if (p->finished) continue;
    deadline_armed_ = true;
    deadline_timer_.expires_at(p->deadline);
    deadline_timer_.async_wait([self = shared_from_this()](error_code ec) {
      self->deadline_armed_ = false;
      if (ec) return;
      auto now = clock::now();
      for (auto* q : self->pending_) {
        if (q->finished) continue;
        if (q->deadline > now) break;
        // The reply may still come: it is discarded then (the command may have run).
        self->finish(q, errc::timeout, {});
      }
      self->arm_deadline_timer();
    });
    return;
  }
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

asio::awaitable<std::pair<error_code, reply>> connection::eval(const std::vector<std::string>& keys,
                                                               const std::vector<std::string>& args) {
  std::vector<std::string> cmd;
  cmd.reserve(3 + keys.size() + args.size());
  cmd.push_back("EVALSHA");
  cmd.push_back(sha_);
  cmd.push_back(std::to_string(keys.size()));
  cmd.insert(cmd.end(), keys.begin(), keys.end());
  cmd.insert(cmd.end(), args.begin(), args.end());
  auto result = co_await command(cmd);
  if (!result.first && result.second.is_error() && result.second.str.starts_with("NOSCRIPT")) {
    // Flushed or a new server: EVAL sends the script (and caches it) once.
    cmd[0] = "EVAL";
    cmd[1] = script_;
    result = co_await command(std::move(cmd));
  }
  co_return result;
}

}  // namespace fg::redis
