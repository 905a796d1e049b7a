// The C++ API (header-only over the C API) on the static libchorus.a that //:chorus builds:
// Status and StatusOr, errors from each layer, a Work that never started, collectives among 2
// ranks, and Split, CreateGroup and Shrink among 3, the ranks being threads of this process over
// one file store.
#include <stdlib.h>

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "chorus/chorus.h"

namespace {

using chorus::DataType;
using chorus::ErrorKind;
using chorus::ReduceOp;
using chorus::Status;

TEST_CASE("Status and StatusOr carry kind, peer and message", "[cpp_api]") {
  Status ok;
  CHECK(ok.ok());
  CHECK(ok.ToString() == "ok");
  Status failed(ErrorKind::kPeerUnavailable, "rank 3 closed the connection", 3);
  CHECK(!failed.ok());
  CHECK(failed.peer_rank() == 3);
  CHECK(failed.ToString() == "peer unavailable: rank 3 closed the connection");

  chorus::StatusOr<std::string> value(std::string("x"));
  REQUIRE(value.ok());
  CHECK(*value == "x");
  CHECK(value->size() == 1);
  chorus::StatusOr<int> error(failed);
  CHECK(!error.ok());
  CHECK(error.status().kind() == ErrorKind::kPeerUnavailable);
  chorus::StatusOr<int> from_ok{Status()};  // a bug in the caller, said so
  CHECK(from_ok.status().kind() == ErrorKind::kInternal);
  CHECK(chorus::DataTypeSize(chorus::DataTypeOf<double>()) == 8);
}

TEST_CASE("each layer reports errors as values", "[cpp_api]") {
  auto store = chorus::Store::Open("file:relative/path");
  REQUIRE(!store.ok());
  CHECK(store.status().kind() == ErrorKind::kInvalidArgument);
  CHECK(!store.status().message().empty());
  auto device = chorus::Device::Create("carrier-pigeon");
  REQUIRE(!device.ok());
  CHECK(device.status().message().find("carrier-pigeon") != std::string::npos);
}

// Runs body(rank, store_url) on `size` threads over a fresh file store, and returns each rank's
// first failure ("" if none).
std::vector<std::string> RunRanks(
    int size, const std::function<std::string(int, const std::string&)>& body) {
  const char* base = getenv("TEST_TMPDIR");
  std::string dir = std::string(base ? base : "/tmp") + "/cpp_api_test.XXXXXX";
  REQUIRE(mkdtemp(dir.data()) != nullptr);
  std::vector<std::string> failures(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] { failures[rank] = body(rank, "file://" + dir); });
  }
  for (std::thread& thread : threads) thread.join();
  std::system(("rm -rf '" + dir + "'").c_str());
  return failures;
}

TEST_CASE("collectives, work and point-to-point among 2 ranks", "[cpp_api]") {
  auto rank_body = [](int rank, const std::string& url) -> std::string {
    auto store = chorus::Store::Open(url);
    auto device = chorus::Device::Create("tcp");
    if (!store.ok() || !device.ok()) return "setup";
    chorus::CommunicatorOptions options;
    options.timeout_seconds = 30;
    auto created = chorus::Communicator::Create(*store, "cpp", *device, rank, 2, options);
    if (!created.ok()) return created.status().ToString();
    chorus::Communicator comm = std::move(*created);  // movable, like every handle

    // A per-rank array of the wrong length fails before anything starts; so does its Work.
    std::vector<float> in = {1.0f + rank, 2.0f + rank}, out(4);
    Status bad = comm.AllGatherV(in.data(), out.data(), {2, 2, 2}, DataType::kFloat32);
    if (bad.kind() != ErrorKind::kInvalidArgument) return "AllGatherV: " + bad.ToString();
    chorus::Work never = comm.AllGatherVAsync(in.data(), out.data(), {2}, DataType::kFloat32);
    if (!never.Test() || never.Wait().kind() != ErrorKind::kInvalidArgument) return "never";

    // ReduceScatter: rank r gets block r of the sum.
    float block = -1;
    Status s = comm.ReduceScatter(in.data(), &block, 1, DataType::kFloat32, ReduceOp::kSum);
    if (!s.ok() || block != (rank == 0 ? 3.0f : 5.0f)) return "ReduceScatter: " + s.ToString();

    // AllToAllV with per-rank counts and displacements, asynchronous.
    std::vector<int32_t> send = {rank * 10, rank * 10 + 1, rank * 10 + 2}, recv(3, -1);
    const std::vector<size_t> send_counts =
        rank == 0 ? std::vector<size_t>{1, 2} : std::vector<size_t>{2, 1};
    const std::vector<size_t> send_displs = {0, send_counts[0]};
    const std::vector<size_t> recv_counts =
        rank == 0 ? std::vector<size_t>{1, 2} : std::vector<size_t>{2, 1};
    const std::vector<size_t> recv_displs = {0, recv_counts[0]};
    chorus::Work work = comm.AllToAllVAsync(send.data(), send_counts, send_displs, recv.data(),
                                            recv_counts, recv_displs, DataType::kInt32);
    s = work.Wait(30);
    const std::vector<int32_t> expected =
        rank == 0 ? std::vector<int32_t>{0, 10, 11} : std::vector<int32_t>{1, 2, 12};
    if (!s.ok() || recv != expected) return "AllToAllV: " + s.ToString();

    // RecvFromAny names the sender.
    if (rank == 0) {
      int64_t got = 0;
      chorus::StatusOr<int> from = comm.RecvFromAny(&got, 1, DataType::kInt64, {1}, 4);
      if (!from.ok() || *from != 1 || got != 42) return "RecvFromAny: " + from.status().ToString();
    } else {
      const int64_t answer = 42;
      s = comm.Send(&answer, 1, DataType::kInt64, 0, 4);
      if (!s.ok()) return "Send: " + s.ToString();
    }
    s = comm.Barrier();
    if (!s.ok()) return "Barrier: " + s.ToString();
    if (comm.FlightRecorderDump().find("alltoallv") == std::string::npos) return "dump";
    return "";
  };
  const std::vector<std::string> failures = RunRanks(2, rank_body);
  CHECK(failures[0] == "");
  CHECK(failures[1] == "");
}

TEST_CASE("Split, CreateGroup and Shrink among 3 ranks", "[cpp_api]") {
  auto rank_body = [](int rank, const std::string& url) -> std::string {
    auto store = chorus::Store::Open(url);
    auto device = chorus::Device::Create("tcp");
    if (!store.ok() || !device.ok()) return "setup";
    chorus::CommunicatorOptions options;
    options.timeout_seconds = 30;
    auto comm = chorus::Communicator::Create(*store, "cpp-split", *device, rank, 3, options);
    if (!comm.ok()) return comm.status().ToString();

    // Ranks 2 and 0, in that order; rank 1 has no color and gets an empty Communicator.
    chorus::StatusOr<chorus::Communicator> pair =
        comm->Split(rank == 1 ? chorus::Communicator::kNoColor : 0, -rank);
    if (!pair.ok()) return "Split: " + pair.status().ToString();
    int32_t sum = -1;
    if (rank == 1) {
      if (*pair || pair->rank() != -1 || pair->size() != 0) return "no color: not empty";
      Status s = pair->AllReduce(&rank, &sum, 1, DataType::kInt32, ReduceOp::kSum);
      if (s.kind() != ErrorKind::kInvalidArgument) return "empty AllReduce: " + s.ToString();
    } else {
      std::vector<int32_t> members(2, -1);
      Status s = pair->AllGather(&rank, members.data(), 1, DataType::kInt32);
      if (!s.ok() || members != std::vector<int32_t>{2, 0}) return "Split order: " + s.ToString();
      s = pair->AllReduce(&rank, &sum, 1, DataType::kInt32, ReduceOp::kSum);
      if (!s.ok() || sum != 2) return "Split AllReduce: " + s.ToString();
    }

    // A group of ranks 2 and 1, made by them alone while rank 0 goes on.
    auto bad = comm->CreateGroup({rank, 3});
    if (bad.ok() || bad.status().kind() != ErrorKind::kInvalidArgument) return "bad group";
    if (rank > 0) {
      auto group = comm->CreateGroup({2, 1});
      if (!group.ok()) return "CreateGroup: " + group.status().ToString();
      if (group->rank() != 2 - rank || group->size() != 2) return "group ranks";
      Status s = group->AllReduce(&rank, &sum, 1, DataType::kInt32, ReduceOp::kMax);
      if (!s.ok() || sum != 2) return "group AllReduce: " + s.ToString();
    }

    // Ranks 0 and 1 go on without rank 2, which leaves without calling Shrink.
    if (rank == 2) return "";
    auto self = comm->Shrink({rank});
    if (self.ok() || self.status().kind() != ErrorKind::kInvalidArgument) return "Shrink self";
    auto survivors = comm->Shrink({2});
    if (!survivors.ok()) return "Shrink: " + survivors.status().ToString();
    if (survivors->rank() != rank || survivors->size() != 2) return "Shrink ranks";
    { chorus::Communicator parent = std::move(*comm); }  // destroyed before its successor
    double value = rank + 1, total = 0;
    Status s = survivors->AllReduce(&value, &total, 1, DataType::kFloat64, ReduceOp::kSum);
    if (!s.ok() || total != 3.0) return "shrunk AllReduce: " + s.ToString();
    return "";
  };
  const std::vector<std::string> failures = RunRanks(3, rank_body);
  for (int rank = 0; rank < 3; ++rank) {
    INFO("rank " << rank);
    CHECK(failures[rank] == "");
  }
}

}  // namespace
