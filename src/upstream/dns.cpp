#include "upstream/dns.hpp"

#include <ares.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "config/caps.hpp"

namespace fg::upstream {

namespace {

using steady = std::chrono::steady_clock;

bool is_literal(const std::string& host) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  return !ec;
}

void on_answer(void* arg, int status, int /*timeouts*/, ares_addrinfo* res) {
  auto& out = *static_cast<dns_answer*>(arg);
  if (status != ARES_SUCCESS) {
    out.error = ares_strerror(status);
    if (res) ares_freeaddrinfo(res);
    return;
  }
  for (auto* n = res ? res->nodes : nullptr; n; n = n->ai_next) {
    if (n->ai_family == AF_INET) {
      boost::asio::ip::address_v4::bytes_type b;
      std::memcpy(b.data(), &reinterpret_cast<const sockaddr_in*>(n->ai_addr)->sin_addr, b.size());
      out.addresses.emplace_back(boost::asio::ip::address_v4(b));
    } else if (n->ai_family == AF_INET6) {
      boost::asio::ip::address_v6::bytes_type b;
      std::memcpy(b.data(), &reinterpret_cast<const sockaddr_in6*>(n->ai_addr)->sin6_addr, b.size());
      out.addresses.emplace_back(boost::asio::ip::address_v6(b));
    }
  }
  if (res) ares_freeaddrinfo(res);
  std::sort(out.addresses.begin(), out.addresses.end());
  out.addresses.erase(std::unique(out.addresses.begin(), out.addresses.end()), out.addresses.end());
  if (out.addresses.size() > config::caps::addresses_per_name) out.addresses.resize(config::caps::addresses_per_name);
  if (out.addresses.empty()) out.error = "no address";
}

// Runs the channel until its queries are answered, `stop` is set or `until` passes.
void run(ares_channel ch, const std::atomic<bool>* stop, steady::time_point until) {
  for (;;) {
    ares_socket_t socks[ARES_GETSOCK_MAXNUM];
    const int bits = ares_getsock(ch, socks, ARES_GETSOCK_MAXNUM);
    pollfd fds[ARES_GETSOCK_MAXNUM];
    nfds_t n = 0;
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
      short events = 0;
      if (ARES_GETSOCK_READABLE(bits, i)) events |= POLLIN;
      if (ARES_GETSOCK_WRITABLE(bits, i)) events |= POLLOUT;
      if (events) fds[n++] = pollfd{socks[i], events, 0};
    }
    if (n == 0) return;  // every query has its answer
    if ((stop && stop->load()) || steady::now() >= until) {
      ares_cancel(ch);
      return;
    }
    timeval most{0, 100'000}, tv{};  // a slice, to see `stop`
    const timeval* t = ares_timeout(ch, &most, &tv);
    const int ms = static_cast<int>(t->tv_sec * 1000 + t->tv_usec / 1000);
    if (::poll(fds, n, ms) <= 0) {
      ares_process_fd(ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts
      continue;
    }
    for (nfds_t i = 0; i < n; ++i) {
      const bool r = fds[i].revents & (POLLIN | POLLERR | POLLHUP), w = fds[i].revents & POLLOUT;
      if (r || w) ares_process_fd(ch, r ? fds[i].fd : ARES_SOCKET_BAD, w ? fds[i].fd : ARES_SOCKET_BAD);
    }
  }
}

std::string join(const std::vector<ip_address>& a) {
  std::string s;
  for (const auto& x : a) s += (s.empty() ? "" : ", ") + x.to_string();
  return s.empty() ? "none" : s;
}

}  // namespace

std::vector<dns_answer> resolve_names(const config::resolver_config& rc, std::span<const std::string> names,
                                      const std::atomic<bool>* stop) {
  static std::once_flag init;
  std::call_once(init, [] { ares_library_init(ARES_LIB_INIT_ALL); });
  std::vector<dns_answer> out(names.size());
  ares_options o{};
  o.timeout = static_cast<int>(rc.timeout.count());
  o.tries = static_cast<int>(rc.tries);
  ares_channel ch = nullptr;
  if (int st = ares_init_options(&ch, &o, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES); st != ARES_SUCCESS) {
    for (auto& a : out) a.error = std::string("resolver: ") + ares_strerror(st);
    return out;
  }
  if (!rc.servers.empty()) {
    std::string csv;
    for (const auto& s : rc.servers) csv += (csv.empty() ? "" : ",") + s.str();
    if (int st = ares_set_servers_ports_csv(ch, csv.c_str()); st != ARES_SUCCESS) {
      for (auto& a : out) a.error = std::string("resolver.servers: ") + ares_strerror(st);
      ares_destroy(ch);
      return out;
    }
  }
  ares_addrinfo_hints hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = ARES_AI_NOSORT;
  for (std::size_t i = 0; i < names.size(); ++i) ares_getaddrinfo(ch, names[i].c_str(), nullptr, &hints, on_answer, &out[i]);
  // Each try of each name server, and a second for /etc/hosts and the rest.
  const auto servers = std::max<std::size_t>(1, rc.servers.size());
  run(ch, stop, steady::now() + rc.timeout * (rc.tries * servers) + std::chrono::seconds(1));
  ares_destroy(ch);  // (what is still pending ends with ARES_EDESTRUCTION or ARES_ECANCELLED)
  return out;
}

std::vector<std::string> server_names(const std::vector<config::upstream_config>& upstreams) {
  std::set<std::string> names;
  for (const auto& u : upstreams)
    for (const auto& s : u.servers)
      if (!is_literal(s.address.host)) names.insert(s.address.host);
  return {names.begin(), names.end()};
}

std::vector<config::upstream_config> expand(const std::vector<config::upstream_config>& upstreams,
                                            const dns_answers& answers) {
  std::vector<config::upstream_config> out;
  out.reserve(upstreams.size());
  std::size_t total = 0;
  for (const auto& u : upstreams) {
    auto& e = out.emplace_back(u);
    e.servers.clear();
    std::size_t dropped = 0;
    auto add = [&](config::upstream_server s) {
      if (std::any_of(e.servers.begin(), e.servers.end(), [&](auto& x) { return x.address == s.address; })) return;
      if (e.servers.size() >= config::caps::servers || total >= config::caps::servers_total) {
        ++dropped;
        return;
      }
      e.servers.push_back(std::move(s));
      ++total;
    };
    for (const auto& s : u.servers) {
      if (is_literal(s.address.host)) {
        add(s);
        continue;
      }
      auto found = answers.find(s.address.host);
      if (found == answers.end()) continue;
      for (const auto& a : found->second)
        add({config::endpoint{a.to_string(), s.address.port}, s.weight, s.address.str()});
    }
    if (dropped)
      spdlog::warn("upstream {}: {} server address(es) left out: at most {} servers per upstream and {} in all "
                   "(names resolve to more addresses than that)",
                   u.name, dropped, config::caps::servers, config::caps::servers_total);
  }
  return out;
}

void dns_refresher::set(const config::resolver_config& rc, std::vector<std::string> names,
                        std::function<void()> changed) {
  std::vector<std::string> fresh;
  {
    std::lock_guard l(mu_);
    if (!changed_) changed_ = std::move(changed);
    const bool asked_elsewhere = !(rc_ == rc);
    rc_ = rc;
    decltype(names_) next;
    for (auto& n : names) {
      auto it = names_.find(n);
      if (it == names_.end()) {
        fresh.push_back(n);
        next.emplace(std::move(n), entry{});
      } else {
        auto& kept = next.emplace(std::move(n), std::move(it->second)).first->second;
        if (asked_elsewhere) kept.due = {};
      }
    }
    names_ = std::move(next);
  }
  if (!fresh.empty()) {
    auto got = resolve_names(rc, fresh, &stop_);
    std::lock_guard l(mu_);
    apply(fresh, got, steady::now());
  }
  std::lock_guard l(mu_);
  if (!thread_.joinable() && !names_.empty() && !stop_) thread_ = std::thread([this] { loop(); });
  wake_.notify_all();
}

dns_answers dns_refresher::answers() const {
  std::lock_guard l(mu_);
  dns_answers out;
  for (const auto& [name, e] : names_)
    if (e.resolved) out.emplace(name, e.addresses);
  return out;
}

void dns_refresher::stop() {
  {
    std::lock_guard l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool dns_refresher::apply(std::span<const std::string> names, std::span<const dns_answer> got, steady::time_point now) {
  bool changed = false;
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto it = names_.find(names[i]);
    if (it == names_.end()) continue;  // no longer configured
    auto& e = it->second;
    const auto& a = got[i];
    if (a.error.empty()) {
      if (!e.resolved || e.addresses != a.addresses) {
        spdlog::info("upstream server name {} resolves to {} (was {})", names[i], join(a.addresses),
                     e.resolved ? join(e.addresses) : "not resolved");
        changed = true;
      } else if (e.failures) {
        spdlog::info("upstream server name {} resolves again, to the same {} address(es)", names[i], a.addresses.size());
      }
      e.addresses = a.addresses;
      e.resolved = true;
      e.failures = 0;
      e.due = now + rc_.refresh;
      continue;
    }
    ++e.failures;
    const auto backoff = std::min<steady::duration>(rc_.refresh, std::chrono::seconds(1ll << std::min(e.failures - 1, 16u)));
    e.due = now + backoff;
    if (e.resolved)
      spdlog::warn("upstream server name {}: cannot resolve ({}): keeping its last {} address(es) ({}); asking again in {}ms",
                   names[i], a.error, e.addresses.size(), join(e.addresses),
                   std::chrono::duration_cast<std::chrono::milliseconds>(backoff).count());
    else
      spdlog::warn("upstream server name {}: cannot resolve ({}): no server from it yet; asking again in {}ms", names[i],
                   a.error, std::chrono::duration_cast<std::chrono::milliseconds>(backoff).count());
  }
  return changed;
}

void dns_refresher::loop() {
  std::unique_lock l(mu_);
  while (!stop_) {
    const auto now = steady::now();
    std::vector<std::string> due;
    auto next = now + std::chrono::hours(1);
    for (const auto& [name, e] : names_) {
      if (e.due <= now) due.push_back(name);
      else next = std::min(next, e.due);
    }
    if (due.empty()) {
      // (woken early by set() and stop(): the names and their times are looked at again)
      wake_.wait_until(l, next);
      continue;
    }
    const auto rc = rc_;
    l.unlock();
    auto got = resolve_names(rc, due, &stop_);
    l.lock();
    if (stop_) break;
    if (apply(due, got, steady::now()) && changed_) {
      auto f = changed_;
      l.unlock();
      f();
      l.lock();
    }
  }
}

}  // namespace fg::upstream
