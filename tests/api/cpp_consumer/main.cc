// A C++17 program that uses an installed Chorus through find_package(chorus) only.
//   cpp_consumer STORE_URL RANK SIZE
// Runs allreduce (blocking and asynchronous), allgather, allgatherv, a ring of send/recv and a
// barrier, checks every value and the error values of a bad call, and prints "rank R: ok".
#include <chorus/chorus.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

namespace {

int rank = -1;

bool Check(const chorus::Status& status, const char* what) {
  if (status.ok()) return true;
  std::cerr << "rank " << rank << ": " << what << ": " << status.ToString() << "\n";
  return false;
}

bool Expect(bool condition, const char* what) {
  if (!condition) std::cerr << "rank " << rank << ": expected " << what << "\n";
  return condition;
}

bool Run(chorus::Communicator& comm) {
  using chorus::DataType;
  using chorus::ReduceOp;
  const int size = comm.size();
  const size_t n = 4096;
  std::vector<float> in(n), out(n);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<float>((rank + 1) * i);
  if (!Check(comm.AllReduce(in.data(), out.data(), n, DataType::kFloat32, ReduceOp::kSum),
             "allreduce")) {
    return false;
  }
  const float ranks_sum = size * (size + 1) / 2.0f;
  for (size_t i = 0; i < n; ++i) {
    if (!Expect(out[i] == ranks_sum * i, "allreduce sum")) return false;
  }

  int64_t mine = rank, smallest = -1;
  chorus::Work work = comm.AllReduceAsync(&mine, &smallest, 1, chorus::DataTypeOf<int64_t>(),
                                          ReduceOp::kMin);
  if (!Check(work.Wait(), "async allreduce") || !Expect(smallest == 0, "min is 0")) return false;

  std::vector<int32_t> gathered(size * 2);
  const int32_t pair[2] = {rank, -rank};
  if (!Check(comm.AllGather(pair, gathered.data(), 2, DataType::kInt32), "allgather")) {
    return false;
  }
  for (int r = 0; r < size; ++r) {
    if (!Expect(gathered[2 * r] == r && gathered[2 * r + 1] == -r, "allgather")) return false;
  }

  // Rank r contributes r + 1 elements of value r.
  std::vector<size_t> counts(size);
  std::iota(counts.begin(), counts.end(), size_t{1});
  std::vector<uint8_t> block(rank + 1, static_cast<uint8_t>(rank));
  std::vector<uint8_t> packed(std::accumulate(counts.begin(), counts.end(), size_t{0}));
  if (!Check(comm.AllGatherV(block.data(), packed.data(), counts, DataType::kUint8),
             "allgatherv")) {
    return false;
  }
  size_t at = 0;
  for (int r = 0; r < size; ++r) {
    for (size_t i = 0; i < counts[r]; ++i) {
      if (!Expect(packed[at++] == r, "allgatherv")) return false;
    }
  }

  const double token = rank * 10.0;
  double received = -1;
  chorus::Work send = comm.SendAsync(&token, 1, DataType::kFloat64, (rank + 1) % size, 3);
  if (!Check(comm.Recv(&received, 1, DataType::kFloat64, (rank + size - 1) % size, 3), "recv") ||
      !Check(send.Wait(), "send") ||
      !Expect(received == ((rank + size - 1) % size) * 10.0, "ring token")) {
    return false;
  }

  // A per-rank array of the wrong length is refused before anything is sent.
  chorus::Status bad = comm.AllGatherV(block.data(), packed.data(), {1}, DataType::kUint8);
  if (!Expect(bad.kind() == chorus::ErrorKind::kInvalidArgument && !bad.message().empty(),
              "invalid argument")) {
    return false;
  }
  return Check(comm.Barrier(), "barrier") &&
         Expect(!comm.FlightRecorderDump().empty(), "a flight recorder dump");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " STORE_URL RANK SIZE\n";
    return 2;
  }
  rank = std::atoi(argv[2]);
  const int size = std::atoi(argv[3]);
  auto store = chorus::Store::Open(argv[1]);
  if (!Check(store.status(), "store")) return 1;
  auto device = chorus::Device::Create("tcp");
  if (!Check(device.status(), "device")) return 1;
  chorus::CommunicatorOptions options;
  options.timeout_seconds = 60;
  auto comm = chorus::Communicator::Create(*store, "cpp-consumer", *device, rank, size, options);
  if (!Check(comm.status(), "communicator")) return 1;
  if (!Run(*comm)) return 1;
  std::cout << "rank " << rank << ": ok (chorus " << CHORUS_VERSION_STRING << ")\n";
  return 0;
}
