/* The C API of Chorus (C99; also usable from C++). The interface for other languages and for
 * frameworks that prefer C; the C++ API (chorus/chorus.h) is a thin layer over it.
 *
 *   chorus_store_t* store;  chorus_device_t* device;  chorus_comm_t* comm;
 *   chorus_store_open("file:///shared/job42", &store);
 *   chorus_device_create(NULL, &device);
 *   chorus_comm_create(store, "world", device, rank, size, NULL, &comm);
 *   if (chorus_allreduce(comm, in, out, n, CHORUS_FLOAT32, CHORUS_SUM, NULL) != CHORUS_OK)
 *     fprintf(stderr, "%s\n", chorus_last_error());
 *   chorus_comm_destroy(comm);  chorus_device_destroy(device);  chorus_store_destroy(store);
 *
 * Errors: every function that can fail returns a chorus_error_t; on failure the calling
 * thread's chorus_last_error() and chorus_last_error_peer() describe it until that thread's next
 * failing call. No C++ exception ever crosses this interface.
 *
 * Semantics: the buffer shapes, ordering rules, in-place forms, timeouts and failure behaviour of
 * each collective are those of the C++ API (docs/api.md): every rank issues the same collectives
 * in the same order; any failure other than a timeout, an invalid argument or an aborted work
 * breaks the communicator (later calls fail at once; create a new one).
 *
 * Thread-safety: handles may be used from any thread; collectives on one communicator issued from
 * several threads must be ordered by the caller.
 *
 * ABI: stable within a major version (chorus/version.h). Functions and enum values are only
 * added; the option structs only grow at their end, and the library reads only the fields that
 * the caller's `struct_size` covers, so initialise them with their *_INIT macros. */
#ifndef CHORUS_CHORUS_C_H_
#define CHORUS_CHORUS_C_H_

#include <stddef.h>
#include <stdint.h>

#include "chorus/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Errors ---- */
typedef enum chorus_error {
  CHORUS_OK = 0,
  CHORUS_ERR_DEADLINE_EXCEEDED = 1, /* a blocking call ran past its deadline */
  CHORUS_ERR_PEER_UNAVAILABLE = 2,  /* a peer (or the store) died, closed or is unreachable */
  CHORUS_ERR_INVALID_ARGUMENT = 3,  /* the caller passed something unusable */
  CHORUS_ERR_ABORTED = 4,           /* cancelled, or the communicator was aborted */
  CHORUS_ERR_MISMATCH = 5,          /* ranks disagree on a collective's shape */
  CHORUS_ERR_INTERNAL = 6           /* a bug or an unexpected system error */
} chorus_error_t;

/* The message of the calling thread's last failed call ("" if none). Successful calls leave it
 * alone (as errno); the pointer stays valid until that thread's next failing call. */
const char* chorus_last_error(void);
/* The rank of the peer involved in the calling thread's last failure, or -1. */
int chorus_last_error_peer(void);
/* A constant name for `error`: "ok", "deadline exceeded", "peer unavailable", ... */
const char* chorus_error_name(chorus_error_t error);

/* ---- Version ---- */
/* The loaded library's version as CHORUS_VERSION_CODE encodes it, and as "major.minor.patch". */
int chorus_version(void);
const char* chorus_version_string(void);

/* ---- Element types and reduction operators (the values are Chorus's wire format) ---- */
typedef enum chorus_datatype {
  CHORUS_INT8 = 0,
  CHORUS_UINT8 = 1,
  CHORUS_INT32 = 2,
  CHORUS_UINT32 = 3,
  CHORUS_INT64 = 4,
  CHORUS_UINT64 = 5,
  CHORUS_FLOAT16 = 6,  /* IEEE 754 binary16 */
  CHORUS_BFLOAT16 = 7, /* the top 16 bits of a binary32 */
  CHORUS_FLOAT32 = 8,
  CHORUS_FLOAT64 = 9,
  CHORUS_INT16 = 10,
  CHORUS_UINT16 = 11
} chorus_datatype_t;

typedef enum chorus_reduce_op {
  CHORUS_SUM = 0,
  CHORUS_PROD = 1,
  CHORUS_MIN = 2,
  CHORUS_MAX = 3,
  CHORUS_AVG = 4 /* sum, then divide by the rank count (integers truncate toward zero) */
} chorus_reduce_op_t;

/* Bytes per element; 0 for a value outside the enum. */
size_t chorus_datatype_size(chorus_datatype_t type);

/* ---- Handles ---- */
typedef struct chorus_store chorus_store_t;   /* where ranks find each other */
typedef struct chorus_device chorus_device_t; /* one transport endpoint per process */
typedef struct chorus_comm chorus_comm_t;     /* `size` ranks that run collectives together */
typedef struct chorus_work chorus_work_t;     /* one asynchronous operation */

/* Opens a store by URL: "file:///abs/dir" (a directory every rank can reach),
 * "redis://[[user]:password@]host[:port][/prefix]" or "tcp://host:port" (served by the process
 * whose CHORUS_RANK, RANK or SLURM_PROCID is 0, on that address of its host; the others connect).
 * NULL or "" reads the environment: CHORUS_STORE, else MASTER_ADDR and MASTER_PORT (a tcp store on
 * MASTER_ADDR:MASTER_PORT+1, leaving MASTER_PORT to PyTorch's own store). */
chorus_error_t chorus_store_open(const char* url, chorus_store_t** store);
void chorus_store_destroy(chorus_store_t* store);

/* Creates the device of transport "auto" (shared memory within a host, TCP between hosts),
 * "tcp" or "shm"; NULL or "" reads CHORUS_TRANSPORT (default "auto"). Every rank of a job must
 * choose the same. One device serves any number of communicators. */
chorus_error_t chorus_device_create(const char* transport, chorus_device_t** device);
void chorus_device_destroy(chorus_device_t* device);

/* ---- Communicators ---- */
typedef struct chorus_comm_options {
  size_t struct_size;             /* sizeof(chorus_comm_options_t) */
  double timeout_seconds;         /* default deadline of each collective; 0: 30 s */
  double connect_timeout_seconds; /* creating the mesh and connecting; 0: 30 s */
  int worker_threads;             /* threads that run asynchronous collectives; 0: 2 */
  const char* algorithm_rules;    /* CHORUS_ALGO grammar (docs/collectives.md); NULL: none */
} chorus_comm_options_t;
#define CHORUS_COMM_OPTIONS_INIT {sizeof(chorus_comm_options_t), 0.0, 0.0, 0, NULL}

/* Creates rank `rank` of a communicator of `size` ranks. `name` scopes its keys in the store and
 * must be the same on every rank and unique among live communicators. `store` and `device` must
 * outlive the communicator. `options` may be NULL. */
chorus_error_t chorus_comm_create(chorus_store_t* store, const char* name, chorus_device_t* device,
                                  int rank, int size, const chorus_comm_options_t* options,
                                  chorus_comm_t** comm);
/* Aborts unfinished asynchronous work (it fails with CHORUS_ERR_ABORTED), then frees. */
void chorus_comm_destroy(chorus_comm_t* comm);
/* This rank and the rank count (-1 and 0 for a NULL communicator). */
int chorus_comm_rank(const chorus_comm_t* comm);
int chorus_comm_size(const chorus_comm_t* comm);
/* Fails all pending and future operations of `comm` on this rank with CHORUS_ERR_ABORTED, and
 * makes the other ranks' pending operations fail promptly too. */
void chorus_comm_abort(chorus_comm_t* comm, const char* reason);
/* Writes the flight recorder (the last collectives, one line each) into `buffer` as a
 * NUL-terminated string cut to `capacity`; returns the full length (without the NUL), as
 * snprintf does. `buffer` may be NULL when `capacity` is 0. Callable while a collective hangs. */
size_t chorus_comm_flight_recorder_dump(const chorus_comm_t* comm, char* buffer, size_t capacity);

/* ---- Communicators made from a communicator: sub-communicators (split, group) that run over
 * its connections, and the survivors' communicator after failures (shrink). Each is a new
 * handle in `*new_comm` (NULL on failure), destroyed with chorus_comm_destroy like any other.
 * It may outlive the communicator it was made from (it keeps the transport they share alive),
 * so destroy the two in any order. The store and device given to chorus_comm_create must
 * outlive every communicator made from it. A made communicator runs every collective, in
 * parallel with its parent and siblings, and can itself be split, grouped or shrunk. A broken
 * communicator cannot be split or grouped (its error is returned): shrink it. ---- */

/* The color of a rank that joins no communicator of chorus_comm_split (any negative color). */
#define CHORUS_NO_COLOR (-1)

/* Collective over `comm` (every rank calls it, in the same order as its collectives, like
 * MPI_Comm_split): the communicator of the ranks that passed the same `color`, ranked by `key`,
 * ties by their rank in `comm`. A rank that passes a negative color (CHORUS_NO_COLOR) gets NULL
 * and CHORUS_OK. Costs one allgather of 16 bytes per rank on `comm`. */
chorus_error_t chorus_comm_split(chorus_comm_t* comm, int color, int key, chorus_comm_t** new_comm);
/* Called by the ranks of `ranks[0..num_ranks)` only, each with the same list (torch's new_group,
 * MPI_Comm_create_group): the communicator of those ranks, its rank i being rank ranks[i] of
 * `comm`. No communication. The list must hold distinct ranks of `comm`, the caller's among
 * them (else CHORUS_ERR_INVALID_ARGUMENT). Members that pass different lists get different
 * communicators, whose first collective fails at its deadline. */
chorus_error_t chorus_comm_create_group(chorus_comm_t* comm, const int* ranks, size_t num_ranks,
                                        chorus_comm_t** new_comm);
/* Recovery after ranks failed: every rank of `comm` not in `excluded[0..num_excluded)` calls it
 * with the same set, also on a broken communicator, and gets the communicator of the survivors,
 * in their order in `comm`, over new connections of the same device. It never waits on an
 * excluded rank. Errors: CHORUS_ERR_INVALID_ARGUMENT (the caller excluded, bad or repeated
 * ranks); CHORUS_ERR_MISMATCH naming a survivor that excludes other ranks;
 * CHORUS_ERR_PEER_UNAVAILABLE naming a survivor that has gone instead (where that can be told);
 * CHORUS_ERR_DEADLINE_EXCEEDED naming one that never came, after the connect timeout.
 * `excluded` may be NULL when `num_excluded` is 0. */
chorus_error_t chorus_comm_shrink(chorus_comm_t* comm, const int* excluded, size_t num_excluded,
                                  chorus_comm_t** new_comm);

/* Per-call options; NULL everywhere means all defaults. */
/* Where a call's buffers live. AUTO asks the CUDA runtime when the library has CUDA support
 * and a GPU is present (docs/cuda.md), else takes host memory; HOST skips that question. */
typedef enum chorus_memory {
  CHORUS_MEMORY_AUTO = 0,
  CHORUS_MEMORY_HOST = 1,
  CHORUS_MEMORY_CUDA = 2 /* CUDA device memory; an error in a library without CUDA support */
} chorus_memory_t;

typedef struct chorus_call_options {
  size_t struct_size;     /* sizeof(chorus_call_options_t) */
  double timeout_seconds; /* this call's deadline; 0: the communicator's */
  const char* algorithm;  /* "ring", "binomial", ...; NULL: chosen (must agree on all ranks) */
  chorus_memory_t memory; /* where every buffer of the call lives */
  /* For device buffers, the cudaStream_t that orders them (NULL: the legacy default stream):
   * the call starts after the work queued there, and work queued there after the call sees
   * its result. */
  void* cuda_stream;
} chorus_call_options_t;
#define CHORUS_CALL_OPTIONS_INIT {sizeof(chorus_call_options_t), 0.0, NULL, CHORUS_MEMORY_AUTO, NULL}

/* ---- Collectives. Counts are in elements; the v-forms take one count (and displacement) per
 * rank, in arrays of chorus_comm_size() entries (root only where the C++ API says so; NULL
 * elsewhere). Each has an asynchronous form that returns at once with a work handle; its
 * buffers belong to the operation until the work completes. ---- */
chorus_error_t chorus_allreduce(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                chorus_datatype_t type, chorus_reduce_op_t op,
                                const chorus_call_options_t* options);
chorus_error_t chorus_allreduce_async(chorus_comm_t* comm, const void* send, void* recv,
                                      size_t count, chorus_datatype_t type, chorus_reduce_op_t op,
                                      const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_broadcast(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                chorus_datatype_t type, int root,
                                const chorus_call_options_t* options);
chorus_error_t chorus_broadcast_async(chorus_comm_t* comm, const void* send, void* recv,
                                      size_t count, chorus_datatype_t type, int root,
                                      const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_reduce(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, chorus_reduce_op_t op, int root,
                             const chorus_call_options_t* options);
chorus_error_t chorus_reduce_async(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                   chorus_datatype_t type, chorus_reduce_op_t op, int root,
                                   const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_allgather(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                chorus_datatype_t type, const chorus_call_options_t* options);
chorus_error_t chorus_allgather_async(chorus_comm_t* comm, const void* send, void* recv,
                                      size_t count, chorus_datatype_t type,
                                      const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_allgatherv(chorus_comm_t* comm, const void* send, void* recv,
                                 const size_t* counts, chorus_datatype_t type,
                                 const chorus_call_options_t* options);
chorus_error_t chorus_allgatherv_async(chorus_comm_t* comm, const void* send, void* recv,
                                       const size_t* counts, chorus_datatype_t type,
                                       const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_reduce_scatter(chorus_comm_t* comm, const void* send, void* recv,
                                     size_t count, chorus_datatype_t type, chorus_reduce_op_t op,
                                     const chorus_call_options_t* options);
chorus_error_t chorus_reduce_scatter_async(chorus_comm_t* comm, const void* send, void* recv,
                                           size_t count, chorus_datatype_t type,
                                           chorus_reduce_op_t op,
                                           const chorus_call_options_t* options,
                                           chorus_work_t** work);

chorus_error_t chorus_reduce_scatterv(chorus_comm_t* comm, const void* send, void* recv,
                                      const size_t* counts, chorus_datatype_t type,
                                      chorus_reduce_op_t op, const chorus_call_options_t* options);
chorus_error_t chorus_reduce_scatterv_async(chorus_comm_t* comm, const void* send, void* recv,
                                            const size_t* counts, chorus_datatype_t type,
                                            chorus_reduce_op_t op,
                                            const chorus_call_options_t* options,
                                            chorus_work_t** work);

chorus_error_t chorus_gather(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                             chorus_datatype_t type, int root,
                             const chorus_call_options_t* options);
chorus_error_t chorus_gather_async(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                                   chorus_datatype_t type, int root,
                                   const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_gatherv(chorus_comm_t* comm, const void* send, size_t send_count, void* recv,
                              const size_t* counts, const size_t* displs, chorus_datatype_t type,
                              int root, const chorus_call_options_t* options);
chorus_error_t chorus_gatherv_async(chorus_comm_t* comm, const void* send, size_t send_count,
                                    void* recv, const size_t* counts, const size_t* displs,
                                    chorus_datatype_t type, int root,
                                    const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_scatter(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                              chorus_datatype_t type, int root,
                              const chorus_call_options_t* options);
chorus_error_t chorus_scatter_async(chorus_comm_t* comm, const void* send, void* recv,
                                    size_t count, chorus_datatype_t type, int root,
                                    const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_scatterv(chorus_comm_t* comm, const void* send, const size_t* counts,
                               const size_t* displs, void* recv, size_t recv_count,
                               chorus_datatype_t type, int root,
                               const chorus_call_options_t* options);
chorus_error_t chorus_scatterv_async(chorus_comm_t* comm, const void* send, const size_t* counts,
                                     const size_t* displs, void* recv, size_t recv_count,
                                     chorus_datatype_t type, int root,
                                     const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_alltoall(chorus_comm_t* comm, const void* send, void* recv, size_t count,
                               chorus_datatype_t type, const chorus_call_options_t* options);
chorus_error_t chorus_alltoall_async(chorus_comm_t* comm, const void* send, void* recv,
                                     size_t count, chorus_datatype_t type,
                                     const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_alltoallv(chorus_comm_t* comm, const void* send, const size_t* send_counts,
                                const size_t* send_displs, void* recv, const size_t* recv_counts,
                                const size_t* recv_displs, chorus_datatype_t type,
                                const chorus_call_options_t* options);
chorus_error_t chorus_alltoallv_async(chorus_comm_t* comm, const void* send,
                                      const size_t* send_counts, const size_t* send_displs,
                                      void* recv, const size_t* recv_counts,
                                      const size_t* recv_displs, chorus_datatype_t type,
                                      const chorus_call_options_t* options, chorus_work_t** work);

chorus_error_t chorus_barrier(chorus_comm_t* comm, const chorus_call_options_t* options);
chorus_error_t chorus_barrier_async(chorus_comm_t* comm, const chorus_call_options_t* options,
                                    chorus_work_t** work);

/* ---- Point-to-point: `count` elements with a tag < 2^31. Messages with the same (peer, tag)
 * arrive in order; a receive of a different length fails with CHORUS_ERR_MISMATCH. They take
 * no sequence number and may be interleaved freely with collectives. ---- */
chorus_error_t chorus_send(chorus_comm_t* comm, const void* data, size_t count,
                           chorus_datatype_t type, int peer, uint32_t tag,
                           const chorus_call_options_t* options);
chorus_error_t chorus_send_async(chorus_comm_t* comm, const void* data, size_t count,
                                 chorus_datatype_t type, int peer, uint32_t tag,
                                 const chorus_call_options_t* options, chorus_work_t** work);
chorus_error_t chorus_recv(chorus_comm_t* comm, void* data, size_t count, chorus_datatype_t type,
                           int peer, uint32_t tag, const chorus_call_options_t* options);
chorus_error_t chorus_recv_async(chorus_comm_t* comm, void* data, size_t count,
                                 chorus_datatype_t type, int peer, uint32_t tag,
                                 const chorus_call_options_t* options, chorus_work_t** work);
/* Receives one message with `tag` from whichever of `peers[0..num_peers)` sends first and stores
 * its rank in `*from` (chorus_work_peer() for the asynchronous form). */
chorus_error_t chorus_recv_from_any(chorus_comm_t* comm, void* data, size_t count,
                                    chorus_datatype_t type, const int* peers, size_t num_peers,
                                    uint32_t tag, int* from, const chorus_call_options_t* options);
chorus_error_t chorus_recv_from_any_async(chorus_comm_t* comm, void* data, size_t count,
                                          chorus_datatype_t type, const int* peers,
                                          size_t num_peers, uint32_t tag,
                                          const chorus_call_options_t* options,
                                          chorus_work_t** work);

/* ---- Work ---- */
/* Waits up to `timeout_seconds` (negative: without limit) and returns the outcome. A wait that
 * runs out returns CHORUS_ERR_DEADLINE_EXCEEDED and the operation goes on; its own deadline is
 * what fails it. */
chorus_error_t chorus_work_wait(chorus_work_t* work, double timeout_seconds);
/* 1 once the operation has finished (successfully or not), else 0. Never blocks. */
int chorus_work_test(const chorus_work_t* work);
/* Ends the operation on this rank with CHORUS_ERR_ABORTED; peers are not told (use
 * chorus_comm_abort for that). */
void chorus_work_abort(chorus_work_t* work);
/* The peer of a finished point-to-point operation (the sender, for recv_from_any); else -1. */
int chorus_work_peer(const chorus_work_t* work);
/* Frees the handle. An unfinished operation is aborted and waited for first, so its buffers
 * are free when this returns. */
void chorus_work_destroy(chorus_work_t* work);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* CHORUS_CHORUS_C_H_ */
