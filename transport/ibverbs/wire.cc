#include "chorus/transport/ibverbs/wire.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "chorus/core/status.h"

namespace chorus::ibverbs {
namespace {

constexpr absl::string_view kPrefix = "ibverbs1:";
constexpr size_t kMaxDeviceName = 255;

class Writer {
 public:
  template <typename T>
  void Put(T value) {
    uint8_t bytes[sizeof(T)];
    for (size_t i = 0; i < sizeof(T); ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
    out_.append(reinterpret_cast<const char*>(bytes), sizeof(T));
  }
  void PutBytes(const void* data, size_t size) {
    out_.append(static_cast<const char*>(data), size);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  template <typename T>
  bool Get(T* value) {
    if (in_.size() < sizeof(T)) return false;
    T result = 0;
    for (size_t i = 0; i < sizeof(T); ++i) {
      result |= static_cast<T>(static_cast<uint8_t>(in_[i])) << (8 * i);
    }
    in_.remove_prefix(sizeof(T));
    *value = result;
    return true;
  }
  bool GetBytes(void* data, size_t size) {
    if (in_.size() < size) return false;
    std::memcpy(data, in_.data(), size);
    in_.remove_prefix(size);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  absl::string_view in_;
};

}  // namespace

std::string FormatPublishedAddress(const PublishedAddress& address) {
  Writer writer;
  writer.PutBytes(address.gid.data(), address.gid.size());
  writer.Put<uint16_t>(address.lid);
  writer.Put<uint8_t>(address.link_layer);
  writer.Put<uint32_t>(address.mtu_bytes);
  writer.Put<uint32_t>(address.psn);
  writer.Put<uint64_t>(address.mesh_id);
  writer.Put<uint32_t>(address.slots);
  writer.Put<uint32_t>(address.slot_bytes);
  writer.Put<uint32_t>(address.read_depth);
  writer.Put<uint8_t>(static_cast<uint8_t>(std::min(address.device.size(), kMaxDeviceName)));
  writer.PutBytes(address.device.data(), std::min(address.device.size(), kMaxDeviceName));
  writer.Put<uint8_t>(static_cast<uint8_t>(std::min(address.host.size(), kMaxDeviceName)));
  writer.PutBytes(address.host.data(), std::min(address.host.size(), kMaxDeviceName));
  writer.Put<uint32_t>(address.pid);
  writer.Put<uint32_t>(static_cast<uint32_t>(address.endpoints.size()));
  for (const PeerEndpoint& endpoint : address.endpoints) {
    writer.Put<uint32_t>(endpoint.qp_num);
    writer.Put<uint64_t>(endpoint.ring_address);
    writer.Put<uint32_t>(endpoint.ring_rkey);
  }
  return absl::StrCat(kPrefix, absl::BytesToHexString(writer.Take()));
}

absl::StatusOr<PublishedAddress> ParsePublishedAddress(absl::string_view text) {
  const absl::Status bad = InvalidArgumentError(absl::StrCat(
      "not a published verbs address: '", text.substr(0, 64), text.size() > 64 ? "...'" : "'"));
  if (!absl::ConsumePrefix(&text, kPrefix) || text.size() % 2 != 0 ||
      text.find_first_not_of("0123456789abcdefABCDEF") != absl::string_view::npos) {
    return bad;
  }
  const std::string bytes = absl::HexStringToBytes(text);
  Reader reader(bytes);
  PublishedAddress address;
  uint8_t name_length = 0;
  uint32_t endpoints = 0;
  if (!reader.GetBytes(address.gid.data(), address.gid.size()) || !reader.Get(&address.lid) ||
      !reader.Get(&address.link_layer) || !reader.Get(&address.mtu_bytes) ||
      !reader.Get(&address.psn) || !reader.Get(&address.mesh_id) || !reader.Get(&address.slots) ||
      !reader.Get(&address.slot_bytes) || !reader.Get(&address.read_depth) ||
      !reader.Get(&name_length)) {
    return bad;
  }
  address.device.resize(name_length);
  uint8_t host_length = 0;
  if (!reader.GetBytes(address.device.data(), name_length) || !reader.Get(&host_length)) {
    return bad;
  }
  address.host.resize(host_length);
  if (!reader.GetBytes(address.host.data(), host_length) || !reader.Get(&address.pid) ||
      !reader.Get(&endpoints) || endpoints > (1u << 24)) {
    return bad;
  }
  address.endpoints.resize(endpoints);
  for (PeerEndpoint& endpoint : address.endpoints) {
    if (!reader.Get(&endpoint.qp_num) || !reader.Get(&endpoint.ring_address) ||
        !reader.Get(&endpoint.ring_rkey)) {
      return bad;
    }
  }
  if (!reader.done()) return bad;
  return address;
}

std::string GidToString(const std::array<uint8_t, 16>& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, gid.data(), text, sizeof(text)) == nullptr) return "?";
  return text;
}

bool SlotHeaderValid(const SlotHeader& header, size_t slot_bytes) {
  switch (header.kind) {
    case SlotKind::kData:
      return header.fragment_bytes <= slot_bytes - kSlotHeaderBytes &&
             header.offset <= header.message_bytes &&
             header.fragment_bytes <= header.message_bytes - header.offset;
    case SlotKind::kAnnounce:
    case SlotKind::kDone:
      return true;
  }
  return false;
}

}  // namespace chorus::ibverbs
