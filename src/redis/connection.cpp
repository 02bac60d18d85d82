#include "redis/connection.hpp"

#include <boost/asio/async_result.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include <random>

namespace fg::redis {

namespace asio = boost::asio;
using error_code = boost::system::error_code;
using clock = std::chrono::steady_clock;

namespace {

double random01() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

}  // namespace

connection::connection(asio::any_io_executor ex, config::redis_config cfg, std::string script)
    : ex_(ex), cfg_(std::move(cfg)), script_(std::move(script)), sd_(ex),
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
  send({"SCRIPT", "LOAD", script_.text()}, log_error("SCRIPT LOAD"));
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
  // One line per cause per few seconds, with a count of what was not logged.
  std::uint64_t suppressed = 0;
  if (!error_log_.due(why, clock::now(), suppressed)) return;
  if (suppressed) spdlog::warn("Redis {}: {} ({} more since the last report)", cfg_.addresses.front().str(), why, suppressed);
  else spdlog::warn("Redis {}: {}", cfg_.addresses.front().str(), why);
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
  self->write_soon();
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

void connection::write_soon() {
  // Once connected the socket is almost always writable: write at the end of this
  // event-loop turn (commands queued meanwhile go in the same write) and wait for
  // writability only if hiredis could not write everything.
  if (writing_ || !want_write_ || !sd_.is_open()) return;
  if (!ac_ || !(ac_->c.flags & REDIS_CONNECTED)) {
    wait_write();
    return;
  }
  writing_ = true;
  asio::post(ex_, [self = shared_from_this()] {
    self->writing_ = false;
    if (!self->ac_ || !self->want_write_) return;
    redisAsyncHandleWrite(self->ac_);
    self->wait_write();
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

void connection::finish(pending* p, error_code ec, const redisReply* r) {
  p->finished = true;
  if (p->done) {
    auto done = std::move(p->done);
    done(ec, r);
  }
}

void connection::fail_later(raw_completion done, error_code ec) {
  if (done) asio::post(ex_, [done = std::move(done), ec] { done(ec, nullptr); });
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
  if (!p->finished && rep && rep->type == REDIS_REPLY_ERROR && p->eval_argc != 0 && self->ac_ &&
      std::string_view(rep->str, rep->len).starts_with("NOSCRIPT")) {
    // Flushed, or a new server: EVAL sends the script (and caches it) once.
    auto cmd = self->script_.eval(p->eval_argc, p->eval_args);
    auto* again = new pending{std::move(p->done), clock::now() + self->cfg_.timeout, false, 0, {}};
    delete p;
    self->queue(cmd, again);
    return;
  }
  if (!p->finished) {
    if (rep) self->finish(p, {}, rep);
    else self->finish(p, errc::disconnected, nullptr);
  }
  delete p;
}

bool connection::queue(const std::string& cmd, pending* p) {
  if (!ac_ || !ready_ ||
      redisAsyncFormattedCommand(ac_, &connection::on_reply, p, cmd.data(), cmd.size()) != REDIS_OK) {
    fail_later(std::move(p->done), errc::not_connected);
    delete p;
    return false;
  }
  pending_.push_back(p);
  arm_deadline_timer();
  return true;
}

void connection::send(const std::vector<std::string>& args, completion done) {
  auto cmd = format_command(args);
  raw_completion raw;
  if (done)
    raw = [ex = ex_, done = std::move(done)](error_code ec, const redisReply* r) mutable {
      asio::post(ex, [done = std::move(done), ec, r = reply::from(r)]() mutable { done(ec, std::move(r)); });
    };
  queue(cmd, new pending{std::move(raw), clock::now() + cfg_.timeout, false, 0, {}});
}

void connection::eval(std::size_t argc, std::string args, raw_completion done) {
  auto cmd = script_.evalsha(argc, args);
  auto* p = new pending{std::move(done), clock::now() + cfg_.timeout, false, argc, std::move(args)};
  queue(cmd, p);
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
        self->finish(q, errc::timeout, nullptr);
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

}  // namespace fg::redis
