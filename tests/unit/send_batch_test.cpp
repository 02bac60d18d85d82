#include <catch2/catch.hpp>

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstddef>

#include "upstream/send_batch.hpp"

// upstream::send_batch over real loopback TCP connections: what is queued arrives whole
// and in order on each connection, each write completes with its full length, and a
// socket that cannot take a write now gets it later, from where it stopped.
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using fg::upstream::send_batch;

struct pair {
  tcp::socket client, server;
};

std::vector<pair> connect_pairs(asio::io_context& io, std::size_t n) {
  tcp::acceptor acc(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  std::vector<pair> out;
  for (std::size_t i = 0; i < n; ++i) {
    tcp::socket c(io), s(io);
    c.connect(acc.local_endpoint());
    acc.accept(s);
    out.push_back({std::move(c), std::move(s)});
  }
  return out;
}

struct result {
  bool called = false;
  boost::system::error_code ec;
  std::size_t n = 0;
};

send_batch::handler record(result& r) {
  return [&r](boost::system::error_code ec, std::size_t n) {
    r.called = true;
    r.ec = ec;
    r.n = n;
  };
}

// As a container runtime's seccomp profile does (buildah's, Docker's on older kernels):
// io_uring_setup answers ENOSYS, on the calling thread only.
bool refuse_io_uring_on_this_thread() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 && ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

std::string read_exactly(tcp::socket& s, std::size_t n) {
  std::string got(n, '\0');
  asio::read(s, asio::buffer(got));
  return got;
}

}  // namespace

TEST_CASE("send_batch: queued writes on several connections arrive whole, in one submission", "[upstream]") {
  asio::io_context io;
  auto pairs = connect_pairs(io, 5);
  std::vector<std::string> heads, bodies;
  std::vector<std::array<asio::const_buffer, 2>> bufs(pairs.size());
  std::vector<result> results(pairs.size());
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    heads.push_back("GET /" + std::to_string(i) + " HTTP/1.1\r\nHost: x\r\n\r\n");
    bodies.push_back(std::string(i * 1000, static_cast<char>('a' + i)));
  }
  {
    send_batch::collect sends;
    if (!sends.active()) {
      WARN("io_uring is not available here: writes go one by one (not tested)");
      return;
    }
    REQUIRE(send_batch::current() != nullptr);
    for (std::size_t i = 0; i < pairs.size(); ++i) {
      bufs[i] = {asio::buffer(heads[i]), asio::buffer(bodies[i])};
      send_batch::current()->add(pairs[i].client, bufs[i], record(results[i]));
    }
    // Nothing is sent while the batch collects.
    for (auto& p : pairs) CHECK(p.server.available() == 0);
  }
  CHECK(send_batch::current() == nullptr);
  io.run();
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    INFO("connection " << i);
    CHECK(results[i].called);
    CHECK_FALSE(results[i].ec);
    CHECK(results[i].n == heads[i].size() + bodies[i].size());
    CHECK(read_exactly(pairs[i].server, heads[i].size() + bodies[i].size()) == heads[i] + bodies[i]);
  }
}

TEST_CASE("send_batch: a socket that cannot take the write now gets the rest later, in order", "[upstream]") {
  asio::io_context io;
  auto pairs = connect_pairs(io, 1);
  auto& p = pairs.front();
  // Fill the connection until the kernel takes no more (the peer is not reading).
  p.client.non_blocking(true);
  std::string filler(1 << 16, 'f');
  std::size_t filled = 0;
  for (;;) {
    boost::system::error_code ec;
    auto n = p.client.write_some(asio::buffer(filler), ec);
    if (ec) break;
    filled += n;
  }
  REQUIRE(filled > 0);
  std::string payload(300'000, 'p');
  for (std::size_t i = 0; i < payload.size(); i += 997) payload[i] = static_cast<char>('A' + i % 26);
  std::array<asio::const_buffer, 1> bufs{asio::buffer(payload)};
  result r;
  {
    send_batch::collect sends;
    if (!sends.active()) {
      WARN("io_uring is not available here: writes go one by one (not tested)");
      return;
    }
    send_batch::current()->add(p.client, bufs, record(r));
  }
  // The reader drains everything while the write completes in the background.
  std::string got;
  std::thread reader([&] { got = read_exactly(p.server, filled + payload.size()); });
  io.run();
  reader.join();
  CHECK(r.called);
  CHECK_FALSE(r.ec);
  CHECK(r.n == payload.size());
  CHECK(got.substr(0, filled) == std::string(filled, 'f'));
  CHECK(got.substr(filled) == payload);
}

TEST_CASE("send_batch: a write that completes with_some completes with what the socket took", "[upstream]") {
  // Peers that read nothing, and writes larger than the kernel can hold: each completes
  // with part of it (no error), that part arrives, and nothing waits for the rest. A
  // batch of two goes on the ring; a lone write as an ordinary write_some.
  for (std::size_t count : {std::size_t{2}, std::size_t{1}}) {
    INFO(count << " write(s)");
    asio::io_context io;
    auto pairs = connect_pairs(io, count);
    std::string payload(16 << 20, 'x');
    for (std::size_t i = 0; i < payload.size(); i += 4093) payload[i] = static_cast<char>('a' + i % 26);
    std::array<asio::const_buffer, 1> bufs{asio::buffer(payload)};
    std::vector<result> results(count);
    {
      send_batch::collect sends;
      if (!sends.active()) {
        WARN("io_uring is not available here: writes go one by one (not tested)");
        return;
      }
      for (std::size_t i = 0; i < count; ++i)
        send_batch::current()->add(pairs[i].client, bufs, record(results[i]), false, send_batch::completes::with_some);
    }
    io.run();
    for (std::size_t i = 0; i < count; ++i) {
      INFO("connection " << i);
      CHECK(results[i].called);
      CHECK_FALSE(results[i].ec);
      CHECK(results[i].n > 0);
      CHECK(results[i].n < payload.size());
      CHECK(read_exactly(pairs[i].server, results[i].n) == payload.substr(0, results[i].n));
    }
  }
}

TEST_CASE("send_batch: a write to a closed connection completes with an error", "[upstream]") {
  asio::io_context io;
  auto pairs = connect_pairs(io, 1);
  auto& p = pairs.front();
  p.server.set_option(asio::socket_base::linger(true, 0));
  p.server.close();  // reset
  // The first send after the reset may still be taken; keep sending until one fails.
  std::string data(1000, 'x');
  std::array<asio::const_buffer, 1> bufs{asio::buffer(data)};
  result r;
  for (int attempt = 0; attempt < 20 && !r.ec; ++attempt) {
    r = {};
    {
      send_batch::collect sends;
      if (!sends.active()) {
        WARN("io_uring is not available here: writes go one by one (not tested)");
        return;
      }
      send_batch::current()->add(p.client, bufs, record(r));
    }
    io.restart();
    io.run();
    REQUIRE(r.called);
  }
  CHECK(r.ec);
}

namespace {

// Until `ready` holds, with a deadline: what a peer sent or closed is on our side.
template <class Pred>
bool settle(Pred ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

bool at_end(tcp::socket& s) {
  char c;
  return ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace

TEST_CASE("send_batch: a write that looks first is not sent where the peer closed or sent bytes", "[upstream]") {
  // `stale` connections of `n`: the first half sent bytes nobody asked for, the other
  // half closed; the rest are clean. (Past the ring's 256 entries the looks go one
  // system call each.)
  auto run = [](std::size_t n, std::size_t stale) {
    asio::io_context io;
    auto pairs = connect_pairs(io, n);
    for (std::size_t i = 0; i < stale; ++i) {
      if (i < stale / 2) {
        asio::write(pairs[i].server, asio::buffer(std::string_view("HTTP/1.1 200 OK\r\n\r\n")));
        REQUIRE(settle([&] { return pairs[i].client.available() > 0; }));
      } else {
        pairs[i].server.shutdown(tcp::socket::shutdown_send);
        REQUIRE(settle([&] { return at_end(pairs[i].client); }));
      }
    }
    const std::string data = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    std::array<asio::const_buffer, 1> bufs{asio::buffer(data)};
    std::vector<result> results(n);
    {
      send_batch::collect sends;
      if (!sends.active()) {
        WARN("io_uring is not available here: the pool looks itself (not tested)");
        return;
      }
      for (std::size_t i = 0; i < n; ++i) send_batch::current()->add(pairs[i].client, bufs, record(results[i]), true);
    }
    io.run();
    for (std::size_t i = 0; i < n; ++i) {
      INFO("connection " << i << " of " << n);
      REQUIRE(results[i].called);
      if (i < stale) {
        CHECK(results[i].ec == send_batch::stale_connection());
        CHECK(results[i].n == 0);
      } else {
        CHECK_FALSE(results[i].ec);
        CHECK(read_exactly(pairs[i].server, data.size()) == data);
      }
    }
    // (the clean ones' writes went out in the same submission and have arrived: a stale
    // one's would have too)
    for (std::size_t i = 0; i < stale; ++i) CHECK(pairs[i].server.available() == 0);
    // The clean ones' answers, sent after the look found their sockets empty, are read.
    std::vector<std::string> answers(n);
    std::vector<std::array<char, 64>> bufs_in(n);
    for (std::size_t i = stale; i < n; ++i) {
      pairs[i].client.async_read_some(asio::buffer(bufs_in[i]), [&, i](boost::system::error_code ec, std::size_t m) {
        answers[i] = ec ? "error: " + ec.message() : std::string(bufs_in[i].data(), m);
      });
    }
    for (std::size_t i = stale; i < n; ++i) asio::write(pairs[i].server, asio::buffer(std::string_view("HTTP/1.1 204 No Content\r\n\r\n")));
    io.restart();
    io.run_for(std::chrono::seconds(10));
    for (std::size_t i = stale; i < n; ++i) CHECK(answers[i] == "HTTP/1.1 204 No Content\r\n\r\n");
  };
  run(4, 2);
  run(300, 150);
}

TEST_CASE("send_batch: a collect inside another sends with the outer one, a lone write as an ordinary one",
          "[upstream]") {
  asio::io_context io;
  auto pairs = connect_pairs(io, 2);
  std::string a = "first", b = "second";
  std::array<asio::const_buffer, 1> ba{asio::buffer(a)}, bb{asio::buffer(b)};
  result ra, rb;
  {
    send_batch::collect outer;
    if (!outer.active()) {
      WARN("io_uring is not available here: writes go one by one (not tested)");
      return;
    }
    {
      send_batch::collect inner;  // (the loop's turn holds the outer one: a Redis reply's resumption is inside it)
      CHECK_FALSE(inner.active());
      send_batch::current()->add(pairs[0].client, ba, record(ra));
    }
    // The inner one's end sent nothing: the outer one is still collecting.
    CHECK(send_batch::current() != nullptr);
    CHECK(pairs[0].server.available() == 0);
    send_batch::current()->add(pairs[1].client, bb, record(rb));
  }
  io.run();
  CHECK((ra.called && !ra.ec && rb.called && !rb.ec));
  CHECK(read_exactly(pairs[0].server, a.size()) == a);
  CHECK(read_exactly(pairs[1].server, b.size()) == b);
  // One write alone: an ordinary write, completed the same way.
  result rc;
  {
    send_batch::collect one;
    send_batch::current()->add(pairs[0].client, ba, record(rc));
  }
  io.restart();
  io.run();
  CHECK((rc.called && !rc.ec && rc.n == a.size()));
  CHECK(read_exactly(pairs[0].server, a.size()) == a);
}

TEST_CASE("send_batch: where io_uring is refused, trying it closes no descriptor", "[upstream]") {
  // The failed setup once closed fd 0, and so, on the next worker, whatever held that
  // number by then (in the image: the signal pipe, and SIGTERM went unheard).
  const int null_fd = ::open("/dev/null", O_RDONLY);
  REQUIRE(null_fd >= 0);
  const int saved_stdin = ::dup(0);  // (-1 where fd 0 was closed already)
  REQUIRE(::dup2(null_fd, 0) == 0);
  struct stat before {};
  REQUIRE(::fstat(0, &before) == 0);
  bool refused = false, active = true, fd0_open = false, fd0_same = false;
  int why = 0;  // (errno of the thread that tried the filter)
  // A thread of its own: its send_batch has not tried the ring yet, and the filter stays with it.
  std::thread t([&] {
    refused = refuse_io_uring_on_this_thread();
    if (!refused) {
      why = errno;
      return;
    }
    send_batch::collect sends;
    active = sends.active();
    struct stat after {};
    fd0_open = ::fstat(0, &after) == 0;
    fd0_same = fd0_open && after.st_dev == before.st_dev && after.st_ino == before.st_ino;
  });
  t.join();
  if (saved_stdin >= 0) {
    ::dup2(saved_stdin, 0);
    ::close(saved_stdin);
  } else {
    ::close(0);
  }
  ::close(null_fd);
  if (!refused) {
    WARN("a seccomp filter cannot be set here (" << std::strerror(why) << "): not tested");
    return;
  }
  CHECK_FALSE(active);
  CHECK(fd0_open);
  CHECK(fd0_same);
}

