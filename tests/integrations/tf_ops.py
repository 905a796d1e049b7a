"""Run by tf_test.sh as chorusrun ranks: every chorus_tf op for every dtype, eagerly and inside
tf.function (graph mode), against NumPy on the values every rank can compute for every other;
the registered gradients of allreduce and allgather; and collectives that differ across ranks
refused with Chorus's mismatch error. Prints "rank R: ok"."""
import os

import numpy as np
import tensorflow as tf

import chorus_tf as ctf

tf.get_logger().setLevel("ERROR")  # retracing notices: each op is traced per dtype on purpose

DTYPES = [tf.int8, tf.uint8, tf.int16, tf.uint16, tf.int32, tf.uint32, tf.int64, tf.uint64,
          tf.float16, tf.bfloat16, tf.float32, tf.float64]
REDUCE = {"sum": np.sum, "min": np.min, "max": np.max, "prod": np.prod}


def values(rank, rows=6, seed=0):
    generator = np.random.default_rng(1000 * seed + rank)
    return generator.integers(1, 4, size=(rows, 3)).astype(np.float64)


def check(got, expected, what):
    got = np.asarray(tf.cast(got, tf.float64))
    if not np.array_equal(got, expected):
        raise AssertionError("%s: got %s, expected %s" % (what, got, expected))


def run_all(rank, size, mode):
    wrap = tf.function if mode == "graph" else (lambda f: f)
    for dtype in DTYPES:
        every = [values(r) for r in range(size)]
        mine = tf.cast(every[rank], dtype)
        for op, reduce in REDUCE.items():
            got = wrap(lambda t: ctf.allreduce(t, op))(mine)
            check(got, reduce(np.stack(every), axis=0), "%s allreduce %s %s" % (mode, op, dtype))
        if dtype.is_floating:
            got = wrap(lambda t: ctf.allreduce(t, "avg"))(mine)
            check(got, np.mean(np.stack(every), axis=0), "%s allreduce avg %s" % (mode, dtype))
        for root in range(size):
            got = wrap(lambda t: ctf.broadcast(t, root))(mine)
            check(got, every[root], "%s broadcast %s root %d" % (mode, dtype, root))
        # Rank r contributes r + 1 rows.
        ragged = [values(r, rows=r + 1, seed=1) for r in range(size)]
        got = wrap(ctf.allgather)(tf.cast(ragged[rank], dtype))
        check(got, np.concatenate(ragged), "%s allgather %s" % (mode, dtype))
        whole = [values(r, rows=2 * size, seed=2) for r in range(size)]
        got = wrap(lambda t: ctf.reduce_scatter(t, "sum"))(tf.cast(whole[rank], dtype))
        check(got, np.sum(np.stack(whole), axis=0)[2 * rank:2 * rank + 2],
              "%s reduce_scatter %s" % (mode, dtype))
        got = wrap(ctf.alltoall)(tf.cast(whole[rank], dtype))
        check(got, np.concatenate([whole[s][2 * rank:2 * rank + 2] for s in range(size)]),
              "%s alltoall %s" % (mode, dtype))
    ctf.barrier()


def check_gradients(rank, size):
    x = tf.Variable(values(rank, seed=3), dtype=tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(ctf.allreduce(x, "sum") * (rank + 1.0))
    # d/dx_r sum_s (s+1) * sum_q x_q = sum_s (s+1), on every rank.
    check(tape.gradient(loss, x), np.full((6, 3), sum(range(1, size + 1))), "allreduce gradient")
    rows = tf.Variable(values(rank, rows=rank + 1, seed=4), dtype=tf.float32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(ctf.allgather(rows) * (rank + 1.0))
    check(tape.gradient(loss, rows), np.full((rank + 1, 3), sum(range(1, size + 1))),
          "allgather gradient")


def check_named_order(rank):
    # Two same-sized named allreduces, in one order on rank 0 and the other elsewhere: refused,
    # naming the op, instead of pairing a with b. Both ranks skip both data collectives, so the
    # communicator stays usable.
    first, second = ("a", "b") if rank == 0 else ("b", "a")
    for name in (first, second):
        try:
            ctf.allreduce(tf.ones([4]), "sum", name=name)
        except tf.errors.InvalidArgumentError as error:
            if "collective mismatch" not in error.message:
                raise
            continue
        raise AssertionError("named collectives in different orders were not refused")
    got = ctf.allreduce(tf.ones([4]), "sum", name="c")
    check(got, np.full(4, float(ctf.size())), "a named allreduce after the refusal")


def check_mismatch(rank):
    # Rank 0 issues a collective the others do not: Chorus's mismatch error, not a hang. (Last:
    # the communicator is unusable afterwards.)
    try:
        ctf.allreduce(tf.ones([4 if rank == 0 else 8]), "sum")
    except tf.errors.OpError as error:
        if "mismatch" not in error.message:
            raise
        return
    raise AssertionError("collectives of different sizes were not refused")


def main():
    rank, size = ctf.init()
    assert rank == int(os.environ["CHORUS_RANK"]) and size == int(os.environ["CHORUS_SIZE"])
    run_all(rank, size, "eager")
    run_all(rank, size, "graph")
    check_gradients(rank, size)
    check_named_order(rank)
    check_mismatch(rank)
    print("rank %d: ok" % rank, flush=True)


if __name__ == "__main__":
    main()
