#include "bootstrap/tcp_store.hpp"

#include <algorithm>
#include <limits>

#include "bootstrap/store_protocol.hpp"
#include "core/error.hpp"

namespace commux::bootstrap {

using protocol::Command;
using protocol::Reply;

namespace {
// How long past its own wait a reply may take before the connection counts as broken.
constexpr std::chrono::seconds kReplySlack{30};
}  // namespace

TcpStore::TcpStore(const Endpoint& server, const Secret& secret, std::chrono::milliseconds timeout,
                   std::string prefix)
    : server_(server), secret_(secret), timeout_(timeout), prefix_(std::move(prefix)) {
  socket_ = connectTo(server_, Clock::now() + timeout_);
  protocol::Writer greeting;
  greeting.u32(protocol::kMagic).u16(protocol::kVersion).raw(secret_.data(), secret_.size());
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint8_t reply = 0xff;
  try {
    reply = roundTrip(greeting.bytes(), std::chrono::milliseconds(0));
  } catch (const core::Error&) {
    // A server that drops the greeting closes the connection: a wrong secret or version.
    COMMUX_FAIL(Store, "commux: the bootstrap store at ", server_.str(),
                " refused this process (a unique id or secret of another job?)");
  }
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store,
               "commux: the bootstrap store at ", server_.str(), " answered the greeting with ",
               int(reply));
}

std::string TcpStore::location() const { return "the bootstrap store at " + server_.str(); }

std::shared_ptr<core::KeyValueStore> TcpStore::clone() { return withPrefix(prefix_); }

std::shared_ptr<TcpStore> TcpStore::withPrefix(const std::string& prefix) const {
  return std::make_shared<TcpStore>(server_, secret_, timeout_, prefix);
}

void TcpStore::broken(const char* doing) {
  socket_.reset();
  COMMUX_FAIL(Network, "commux: ", location(), " stopped answering while ", doing,
              " (the process that serves it may have exited)");
}

std::uint8_t TcpStore::roundTrip(const std::vector<std::uint8_t>& request,
                                 std::chrono::milliseconds wait) {
  if (!socket_.valid()) broken("reconnecting");
  const auto start = Clock::now();
  if (!socket_.sendAll(request.data(), request.size(), start + timeout_ + kReplySlack)) {
    broken("sending a request");
  }
  replyDeadline_ = Clock::now() + wait + kReplySlack;
  std::uint8_t reply = 0;
  read(&reply, 1);
  return reply;
}

void TcpStore::read(void* data, std::size_t size) {
  if (!socket_.recvAll(data, size, replyDeadline_)) broken("answering");
}

void TcpStore::set(const std::string& key, const std::vector<std::uint8_t>& value) {
  const std::string name = prefix_ + key;
  COMMUX_CHECK(name.size() <= protocol::kMaxKeyBytes, InvalidArgument, "commux: store key of ",
               name.size(), " bytes is longer than ", protocol::kMaxKeyBytes);
  COMMUX_CHECK(value.size() <= protocol::kMaxValueBytes, InvalidArgument,
               "commux: store value of ", value.size(), " bytes is larger than ",
               protocol::kMaxValueBytes);
  protocol::Writer w;
  w.u8(static_cast<std::uint8_t>(Command::Set)).str(name).str(value);
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint8_t reply = roundTrip(w.bytes(), std::chrono::milliseconds(0));
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: ", location(),
               " refused to store '", name, "' (it holds its limit of ",
               protocol::kMaxStoredBytes, " bytes)");
}

std::vector<std::vector<std::uint8_t>> TcpStore::multiGet(const std::vector<std::string>& keys) {
  COMMUX_CHECK(keys.size() <= protocol::kMaxKeys, InvalidArgument, "commux: ", keys.size(),
               " keys in one store request; at most ", protocol::kMaxKeys);
  protocol::Writer w;
  const auto waitMs = static_cast<std::uint32_t>(
      std::min<long long>(timeout_.count(), std::numeric_limits<std::uint32_t>::max()));
  w.u8(static_cast<std::uint8_t>(Command::Get)).u32(waitMs).u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) {
    const std::string name = prefix_ + key;
    COMMUX_CHECK(name.size() <= protocol::kMaxKeyBytes, InvalidArgument, "commux: store key of ",
                 name.size(), " bytes is longer than ", protocol::kMaxKeyBytes);
    w.str(name);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint8_t reply = roundTrip(w.bytes(), std::chrono::milliseconds(waitMs));
  if (reply == static_cast<std::uint8_t>(Reply::TimedOut)) {
    std::uint32_t missing = 0;
    read(&missing, sizeof(missing));
    COMMUX_CHECK(missing < keys.size(), Store, "commux: ", location(), " answered out of range");
    COMMUX_FAIL(Store, "commux: wait timeout after ", timeout_.count(), " ms for '",
                keys[missing], "' at ", location());
  }
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: ", location(),
               " answered a get with ", int(reply));
  std::vector<std::vector<std::uint8_t>> values(keys.size());
  for (auto& value : values) {
    std::uint32_t size = 0;
    read(&size, sizeof(size));
    if (size > protocol::kMaxValueBytes) broken("answering (a value beyond the limit)");
    value.resize(size);
    if (size) read(value.data(), size);
  }
  return values;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  COMMUX_CHECK(keys.size() <= protocol::kMaxKeys, InvalidArgument, "commux: ", keys.size(),
               " keys in one store request; at most ", protocol::kMaxKeys);
  protocol::Writer w;
  w.u8(static_cast<std::uint8_t>(Command::Check)).u32(static_cast<std::uint32_t>(keys.size()));
  for (const auto& key : keys) w.str(prefix_ + key);
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint8_t reply = roundTrip(w.bytes(), std::chrono::milliseconds(0));
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: ", location(),
               " answered a check with ", int(reply));
  std::uint8_t all = 0;
  read(&all, 1);
  return all == 1;
}

std::int64_t TcpStore::add(const std::string& key, std::int64_t delta) {
  protocol::Writer w;
  w.u8(static_cast<std::uint8_t>(Command::Add)).str(prefix_ + key).i64(delta);
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint8_t reply = roundTrip(w.bytes(), std::chrono::milliseconds(0));
  COMMUX_CHECK(reply == static_cast<std::uint8_t>(Reply::Ok), Store, "commux: ", location(),
               " refused to add to '", prefix_ + key, "', which holds no counter");
  std::int64_t value = 0;
  read(&value, sizeof(value));
  return value;
}

}  // namespace commux::bootstrap
