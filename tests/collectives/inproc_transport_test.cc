// The in-process transport against the interface contract of transport/transport.h: FIFO per
// (peer, tag), message too long, Cancel, Abort, RecvFromAny, and a rank that joins after its
// peers have already gone (it must see them closed, not wait for them).
#include <catch2/catch.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "chorus/core/status.h"
#include "chorus/rendezvous/memory_store.h"
#include "chorus/transport/inproc/inproc_device.h"

namespace chorus {
namespace {

std::vector<std::unique_ptr<Mesh>> MakeMeshes(Store& store, int size) {
  InprocDevice device;
  std::vector<std::unique_ptr<Mesh>> meshes(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      auto mesh = device.CreateMesh(store, rank, size, {}, Deadline::After(absl::Seconds(10)));
      if (mesh.ok()) meshes[rank] = *std::move(mesh);
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (auto& mesh : meshes) REQUIRE(mesh != nullptr);
  return meshes;
}

const Deadline kSoon = Deadline::After(absl::Seconds(10));

TEST_CASE("messages with the same peer and tag arrive in order; tags are independent", "[inproc]") {
  MemoryStore store;
  auto meshes = MakeMeshes(store, 2);
  Connection* to1 = *meshes[0]->GetConnection(1);
  Connection* to0 = *meshes[1]->GetConnection(0);
  int a = 1, b = 2, c = 3, got[3] = {0, 0, 0};
  auto s1 = to1->Send(7, &a, sizeof(a));
  auto s2 = to1->Send(7, &b, sizeof(b));
  auto s3 = to1->Send(8, &c, sizeof(c));
  auto r3 = to0->Recv(8, &got[2], sizeof(int));
  auto r1 = to0->Recv(7, &got[0], sizeof(int));
  auto r2 = to0->Recv(7, &got[1], sizeof(int));
  REQUIRE(WaitAll({s1, s2, s3, r1, r2, r3}, kSoon).ok());
  CHECK(got[0] == 1);
  CHECK(got[1] == 2);
  CHECK(got[2] == 3);
  CHECK(r1->bytes() == sizeof(int));
}

TEST_CASE("a message longer than the buffer fails the receive and is discarded", "[inproc]") {
  MemoryStore store;
  auto meshes = MakeMeshes(store, 2);
  std::vector<char> big(100, 'x'), small(10, '-');
  auto send = (*meshes[0]->GetConnection(1))->Send(1, big.data(), big.size());
  auto recv = (*meshes[1]->GetConnection(0))->Recv(1, small.data(), small.size());
  CHECK(GetErrorKind(recv->Wait(kSoon)) == ErrorKind::kInvalidArgument);
  CHECK(send->Wait(kSoon).ok());
  CHECK(small == std::vector<char>(10, '-'));
}

TEST_CASE("cancel, abort and receive from any", "[inproc]") {
  MemoryStore store;
  auto meshes = MakeMeshes(store, 3);
  int value = 0;
  auto pending = (*meshes[0]->GetConnection(1))->Recv(5, &value, sizeof(value));
  pending->Cancel();
  CHECK(GetErrorKind(pending->Wait(kSoon)) == ErrorKind::kAborted);

  int from2 = 22;
  auto any = meshes[0]->RecvFromAny({1, 2}, 9, MemoryRef{&value, sizeof(value)});
  auto send = (*meshes[2]->GetConnection(0))->Send(9, &from2, sizeof(from2));
  REQUIRE(any->Wait(kSoon).ok());
  CHECK(any->peer() == 2);
  CHECK(value == 22);
  CHECK(send->Wait(kSoon).ok());

  auto waiting = (*meshes[1]->GetConnection(2))->Recv(3, &value, sizeof(value));
  auto own = (*meshes[2]->GetConnection(1))->Recv(3, &value, sizeof(value));
  meshes[2]->Abort("test");
  CHECK(GetErrorKind(own->Wait(kSoon)) == ErrorKind::kAborted);
  const absl::Status status = waiting->Wait(kSoon);
  CHECK(GetErrorKind(status) == ErrorKind::kPeerUnavailable);
  CHECK(ErrorPeerRank(status) == 2);
}

TEST_CASE("a rank that joins after its peers have gone sees them closed", "[inproc]") {
  MemoryStore store;
  InprocDevice device;
  std::unique_ptr<Mesh> late;
  {
    auto first = device.CreateMesh(store, 0, 2, {}, kSoon);
    REQUIRE(first.ok());
  }  // rank 0 joins and leaves before rank 1 arrives
  auto second = device.CreateMesh(store, 1, 2, {}, kSoon);
  REQUIRE(second.ok());
  int value = 0;
  auto recv = (*(*second)->GetConnection(0))->Recv(1, &value, sizeof(value));
  CHECK(GetErrorKind(recv->Wait(kSoon)) == ErrorKind::kPeerUnavailable);
}

}  // namespace
}  // namespace chorus
