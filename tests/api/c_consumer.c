/* A C99 program that uses an installed Chorus through pkg-config only (consumer_test.sh).
 *   consumer STORE_URL RANK SIZE TRANSPORT
 * Runs allreduce (blocking and asynchronous), allgather, a ring of send/recv and a barrier,
 * checks every value, checks that a bad argument is reported with a message, and prints
 * "rank R: ok". Exits non-zero on any failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chorus/chorus_c.h>

#define CHECK(call)                                                                        \
  do {                                                                                     \
    chorus_error_t check_error = (call);                                                   \
    if (check_error != CHORUS_OK) {                                                        \
      fprintf(stderr, "rank %d: %s failed: %s: %s\n", rank, #call,                         \
              chorus_error_name(check_error), chorus_last_error());                        \
      return 1;                                                                            \
    }                                                                                      \
  } while (0)

#define EXPECT(condition)                                                     \
  do {                                                                        \
    if (!(condition)) {                                                       \
      fprintf(stderr, "rank %d: expected %s (line %d)\n", rank, #condition,  \
              __LINE__);                                                      \
      return 1;                                                               \
    }                                                                         \
  } while (0)

enum { kCount = 1000 };

static int run(chorus_comm_t* comm, int rank, int size) {
  int32_t in[kCount], out[kCount], expected_sum = 0;
  int32_t* gathered = malloc(sizeof(int32_t) * kCount * (size_t)size);
  double value = rank + 0.5, total = 0;
  chorus_work_t* work = NULL;
  int32_t token = rank * 100, received = -1;
  int i, r;
  EXPECT(gathered != NULL);
  for (r = 0; r < size; ++r) expected_sum += r + 1;

  for (i = 0; i < kCount; ++i) in[i] = (rank + 1) * (i + 1);
  CHECK(chorus_allreduce(comm, in, out, kCount, CHORUS_INT32, CHORUS_SUM, NULL));
  for (i = 0; i < kCount; ++i) EXPECT(out[i] == expected_sum * (i + 1));

  CHECK(chorus_allreduce_async(comm, &value, &total, 1, CHORUS_FLOAT64, CHORUS_MAX, NULL, &work));
  CHECK(chorus_work_wait(work, -1));
  chorus_work_destroy(work);
  EXPECT(total == size - 1 + 0.5);

  CHECK(chorus_allgather(comm, in, gathered, kCount, CHORUS_INT32, NULL));
  for (r = 0; r < size; ++r) {
    for (i = 0; i < kCount; ++i) EXPECT(gathered[r * kCount + i] == (r + 1) * (i + 1));
  }
  free(gathered);

  /* A ring: each rank sends its token to the next and receives the previous one's. */
  CHECK(chorus_send_async(comm, &token, 1, CHORUS_INT32, (rank + 1) % size, 7, NULL, &work));
  CHECK(chorus_recv(comm, &received, 1, CHORUS_INT32, (rank + size - 1) % size, 7, NULL));
  CHECK(chorus_work_wait(work, -1));
  chorus_work_destroy(work);
  EXPECT(received == ((rank + size - 1) % size) * 100);

  /* Errors are values with a message; nothing is sent, so no rank is left waiting. */
  EXPECT(chorus_broadcast(comm, in, out, kCount, CHORUS_INT32, size, NULL) ==
         CHORUS_ERR_INVALID_ARGUMENT);
  EXPECT(strlen(chorus_last_error()) > 0);

  CHECK(chorus_barrier(comm, NULL));
  EXPECT(chorus_comm_flight_recorder_dump(comm, NULL, 0) > 0);
  return 0;
}

int main(int argc, char** argv) {
  chorus_store_t* store = NULL;
  chorus_device_t* device = NULL;
  chorus_comm_t* comm = NULL;
  chorus_comm_options_t options = CHORUS_COMM_OPTIONS_INIT;
  int rank = -1, size, failed;
  if (argc != 5) {
    fprintf(stderr, "usage: %s STORE_URL RANK SIZE TRANSPORT\n", argv[0]);
    return 2;
  }
  rank = atoi(argv[2]);
  size = atoi(argv[3]);
  EXPECT(chorus_version() == CHORUS_VERSION_CODE);
  options.timeout_seconds = 60;
  CHECK(chorus_store_open(argv[1], &store));
  CHECK(chorus_device_create(argv[4], &device));
  CHECK(chorus_comm_create(store, "c-consumer", device, rank, size, &options, &comm));
  EXPECT(chorus_comm_rank(comm) == rank && chorus_comm_size(comm) == size);
  failed = run(comm, rank, size);
  chorus_comm_destroy(comm);
  chorus_device_destroy(device);
  chorus_store_destroy(store);
  if (!failed) printf("rank %d: ok (chorus %s)\n", rank, chorus_version_string());
  return failed;
}
