#include "obs/span_export.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <spdlog/spdlog.h>

#include "fg_version.hpp"

namespace fg::obs {

namespace {

// `s` as a JSON string: quotes, backslashes and control characters escaped, and any byte
// that does not begin or continue well-formed UTF-8 as U+FFFD (a path a client wrote can
// hold anything; one bad byte would make a collector refuse the whole batch).
void append_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out.push_back('"');
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c == '"' || c == '\\') {
        out.push_back('\\');
        out.push_back(static_cast<char>(c));
      } else if (c < 0x20) {
        out.append("\\u00").push_back(hex[c >> 4]);
        out.push_back(hex[c & 0xf]);
      } else {
        out.push_back(static_cast<char>(c));
      }
      ++i;
      continue;
    }
    // A sequence's length by its lead byte, and the range of its second byte (RFC 3629:
    // no overlong forms, no surrogates, nothing past U+10FFFF).
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4) n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    bool ok = n != 0 && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      ok = k == 1 ? b >= lo && b <= hi : b >= 0x80 && b <= 0xbf;
    }
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out.append("\\ufffd");
      ++i;
    }
  }
  out.push_back('"');
}

void append_attribute(std::string& out, const span_attribute& a) {
  out.append("{\"key\":");
  append_string(out, a.key);
  if (a.is_int) {
    // (int64 is a string in the protobuf JSON mapping)
    out.append(",\"value\":{\"intValue\":\"").append(std::to_string(a.number)).append("\"}}");
  } else {
    out.append(",\"value\":{\"stringValue\":");
    append_string(out, a.text);
    out.append("}}");
  }
}

void append_span(std::string& out, const span& s) {
  out.append("{\"traceId\":\"").append(s.trace_id.data(), s.trace_id.size());
  out.append("\",\"spanId\":\"").append(s.span_id.data(), s.span_id.size()).push_back('"');
  if (s.has_parent()) out.append(",\"parentSpanId\":\"").append(s.parent_id.data(), s.parent_id.size()).push_back('"');
  out.append(",\"name\":");
  append_string(out, s.name);
  out.append(",\"kind\":").append(std::to_string(s.kind));
  // (fixed64: strings too)
  out.append(",\"startTimeUnixNano\":\"").append(std::to_string(s.start_ns));
  out.append("\",\"endTimeUnixNano\":\"").append(std::to_string(s.end_ns)).append("\",\"attributes\":[");
  for (std::size_t i = 0; i < s.attributes.size(); ++i) {
    if (i) out.push_back(',');
    append_attribute(out, s.attributes[i]);
  }
  out.append("],\"status\":{");
  if (s.error) {
    out.append("\"code\":2");
    if (!s.message.empty()) {
      out.append(",\"message\":");
      append_string(out, s.message);
    }
  }
  out.append("}}");
}

std::string host_field(const config::span_export_config& cfg) {
  const bool v6 = cfg.host.find(':') != std::string::npos;
  return (v6 ? "[" + cfg.host + "]" : cfg.host) + ":" + std::to_string(cfg.port);
}

}  // namespace

// Written straight into one string (the ids are hex already): a Boost.JSON tree of the
// same document, built and serialized, cost some 20,000 more instructions a request.
std::string otlp_json(const config::span_export_config& cfg, const std::vector<span>& spans) {
  std::string out;
  out.reserve(512 + 640 * spans.size());
  out.append("{\"resourceSpans\":[{\"resource\":{\"attributes\":[");
  append_attribute(out, {"service.name", cfg.service_name, 0, false});
  out.append("]},\"scopeSpans\":[{\"scope\":{\"name\":\"floodgate\",\"version\":\"" FG_VERSION "\"},\"spans\":[");
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (i) out.push_back(',');
    append_span(out, spans[i]);
  }
  out.append("]}]}]}");
  return out;
}

span_exporter::~span_exporter() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
    if (sending_) sending_->stop();
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void span_exporter::configure(const config::span_export_config& cfg) {
  std::lock_guard l(mu_);
  // Turned off: what is queued still goes where it was to go (cfg_ kept), nothing more is taken.
  accepting_.store(cfg.on(), std::memory_order_relaxed);
  if (!cfg.on()) return;
  cfg_ = cfg;
  capacity_.store(cfg.queue, std::memory_order_relaxed);
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  wake_.notify_all();
}

bool span_exporter::has_room(std::size_t spans) const {
  if (!accepting_.load(std::memory_order_relaxed)) return false;
  if (queued_.load(std::memory_order_relaxed) < capacity_.load(std::memory_order_relaxed)) return true;
  span_events::dropped_queue_full.fetch_add(spans, std::memory_order_relaxed);
  return false;
}

bool span_exporter::take_denial(std::int64_t now_s, std::size_t per_second) {
  if (per_second == 0) return false;
  auto second = denial_second_.load(std::memory_order_relaxed);
  // (a new second: one thread resets the count; a race costs at most a few more)
  if (second != now_s && denial_second_.compare_exchange_strong(second, now_s, std::memory_order_relaxed))
    denials_.store(0, std::memory_order_relaxed);
  return denials_.fetch_add(1, std::memory_order_relaxed) < per_second;
}

void span_exporter::submit(std::vector<span>&& spans) {
  bool wake = false;
  {
    std::lock_guard l(mu_);
    if (!accepting_.load(std::memory_order_relaxed)) return;
    if (queue_.size() + spans.size() > cfg_.queue) {
      span_events::dropped_queue_full.fetch_add(spans.size(), std::memory_order_relaxed);
      return;
    }
    for (auto& s : spans) queue_.push_back(std::move(s));
    queued_.store(queue_.size(), std::memory_order_relaxed);
    wake = queue_.size() >= cfg_.batch;
  }
  if (wake) wake_.notify_one();
}

void span_exporter::run() {
  std::unique_lock l(mu_);
  for (;;) {
    const auto until = std::chrono::steady_clock::now() + cfg_.interval;
    wake_.wait_until(l, until, [&] { return stop_ || queue_.size() >= cfg_.batch; });
    if (queue_.empty()) {
      if (stop_) return;
      continue;
    }
    std::vector<span> batch;
    const auto n = std::min(queue_.size(), cfg_.batch);
    batch.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    queued_.store(queue_.size(), std::memory_order_relaxed);
    const auto cfg = cfg_;
    const bool last = stop_;  // (the one export a stop allows, a second at most: send())
    l.unlock();
    const bool ok = send(cfg, otlp_json(cfg, batch));
    (ok ? span_events::exported : span_events::dropped_export_failed).fetch_add(n, std::memory_order_relaxed);
    l.lock();
    // (a stop that came during the export cut it short: nothing more is sent)
    if (last || stop_) {
      span_events::dropped_export_failed.fetch_add(queue_.size(), std::memory_order_relaxed);
      queue_.clear();
      return;
    }
  }
}

bool span_exporter::send(const config::span_export_config& cfg, std::string body) {
  namespace asio = boost::asio;
  namespace beast = boost::beast;
  namespace http = beast::http;
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  unsigned status = 0;
  std::string error;
  auto timeout = cfg.timeout;
  bool stopping = false;
  {
    // (a stop before this: a second at most; after it, the destructor stops the loop)
    std::lock_guard l(mu_);
    stopping = stop_;
    if (stopping) timeout = std::min(timeout, config::duration{1000});
    sending_ = &ioc;
  }
  // The collector's addresses, looked up when its name changes or a connect failed, and
  // never while stopping: a lookup is the one step no timeout here bounds (an address
  // literal needs none).
  const auto where = host_field(cfg);
  if (where != resolved_for_ || addresses_.empty()) {
    addresses_.clear();
    resolved_for_ = where;
    if (!stopping) {
      boost::system::error_code ec;
      asio::ip::tcp::resolver resolver(ioc);
      for (const auto& e : resolver.resolve(cfg.host, std::to_string(cfg.port), ec)) addresses_.push_back(e.endpoint());
      if (ec) error = "cannot resolve " + cfg.host + ": " + ec.message();
    }
  }
  bool connected = false;
  auto post = [&]() -> asio::awaitable<void> {
    if (addresses_.empty()) throw std::runtime_error(error.empty() ? "no address" : error);
    stream.expires_after(timeout);
    co_await stream.async_connect(addresses_, asio::use_awaitable);
    connected = true;
    http::request<http::string_body> req{http::verb::post, cfg.target, 11};
    req.set(http::field::host, host_field(cfg));
    req.set(http::field::content_type, "application/json");
    req.set(http::field::user_agent, "floodgate/" FG_VERSION);
    req.body() = std::move(body);
    req.prepare_payload();
    co_await http::async_write(stream, req, asio::use_awaitable);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> res;
    res.body_limit(64 * 1024);  // (a collector's answer is small; a larger one is a failure)
    co_await http::async_read(stream, buf, res, asio::use_awaitable);
    status = res.get().result_int();
  };
  asio::co_spawn(ioc, post(), [&](std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      error = x.what();
    }
  });
  ioc.run();
  {
    std::lock_guard l(mu_);
    sending_ = nullptr;
    stopping = stop_;
  }
  if (!connected) addresses_.clear();  // (looked up again next time)
  const bool ok = status >= 200 && status < 300;
  if (!ok && stopping) return false;  // (cut short by the stop: no news of the collector)
  if (!ok && !failing_) {
    spdlog::warn("tracing.export: the collector at http://{}{} {}: spans are dropped (counted) until it takes them",
                 host_field(cfg), cfg.target, error.empty() ? "answered " + std::to_string(status) : "failed: " + error);
  } else if (ok && failing_) {
    spdlog::info("tracing.export: the collector at http://{}{} takes spans again", host_field(cfg), cfg.target);
  }
  failing_ = !ok;
  return ok;
}

}  // namespace fg::obs
