"""Chorus collectives as TensorFlow ops, in the style of Horovod's API.

    import chorus_tf as ctf
    ctf.init()                                   # rank and size from CHORUS_*/torchrun/Slurm
    tape = ctf.DistributedGradientTape(tape)     # gradients averaged over the ranks
    optimizer = ctf.DistributedOptimizer(keras.optimizers.SGD(0.1))   # or, with Keras
    model.fit(..., callbacks=[ctf.BroadcastGlobalVariablesCallback(0)])

The ops run on Chorus's threads (asynchronous kernels); the communicator is created on first
use from the environment (docs/integrations.md). Gradients of a list of tensors are reduced in
one fused allreduce per dtype, so every rank issues the same collectives in the same order
whatever order TensorFlow runs its ops in."""
import hashlib
import os

import tensorflow as tf

_ops = tf.load_op_library(os.path.join(os.path.dirname(__file__), "_chorus_ops.so"))

__all__ = ["init", "rank", "size", "allreduce", "broadcast", "allgather", "reduce_scatter",
           "alltoall", "barrier", "broadcast_variables", "DistributedGradientTape",
           "DistributedOptimizer", "BroadcastGlobalVariablesCallback"]


def init():
    """Joins the job (creates the communicator) and returns (rank, size)."""
    return rank(), size()


def rank():
    return int(_ops.chorus_rank())


def size():
    return int(_ops.chorus_size())


def _key(name):
    """The op's name as the 62-bit key the ops check across the ranks (0: no name, no check)."""
    if name is None:
        return 0
    digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & ((1 << 62) - 1)) + 1


# Every collective takes `name`: ranks then check, before the collective, that they are all at
# the op of that name, and fail with a mismatch error naming it if one is not (ops issued in
# different orders). Unnamed ops are matched by order alone.


def allreduce(tensor, op="avg", name=None):
    """The element-wise reduction over the ranks: op is sum, avg, min, max or prod."""
    return _ops.chorus_allreduce(tensor, reduce_op=op, key=_key(name))


def broadcast(tensor, root=0, name=None):
    return _ops.chorus_broadcast(tensor, root=root, key=_key(name))


def allgather(tensor, name=None):
    """Concatenation over the ranks along the first dimension, which may differ per rank."""
    return _ops.chorus_allgather(tensor, key=_key(name))


def reduce_scatter(tensor, op="sum", name=None):
    """The reduction over the ranks, of which each keeps its block of the first dimension."""
    return _ops.chorus_reduce_scatter(tensor, reduce_op=op, key=_key(name))


def alltoall(tensor, name=None):
    """Block r of the first dimension goes to rank r; block s of the result came from rank s."""
    return _ops.chorus_alltoall(tensor, key=_key(name))


def barrier():
    _ops.chorus_barrier()


def broadcast_variables(variables, root=0):
    """Assigns root's values to every rank's `variables`."""
    for variable in variables:
        variable.assign(broadcast(variable, root, name="broadcast_variables/" + variable.path
                                  if hasattr(variable, "path") else None))


def _fused_allreduce(tensors, op="avg"):
    """Reduces a list of tensors (None kept) with one allreduce per dtype, in a fixed order."""
    result = list(tensors)
    by_dtype = {}
    for index, tensor in enumerate(tensors):
        if tensor is not None:
            if isinstance(tensor, tf.IndexedSlices):
                tensor = tf.convert_to_tensor(tensor)
            by_dtype.setdefault(tensor.dtype.name, []).append((index, tensor))
    for dtype in sorted(by_dtype):
        entries = by_dtype[dtype]
        flat = tf.concat([tf.reshape(t, [-1]) for _, t in entries], axis=0)
        reduced = allreduce(flat, op, name="fused_gradients/" + dtype)
        sizes = [tf.size(t) for _, t in entries]
        for (index, tensor), part in zip(entries, tf.split(reduced, sizes)):
            result[index] = tf.reshape(part, tf.shape(tensor))
    return result


class DistributedGradientTape(tf.GradientTape):
    """A GradientTape whose gradients are averaged over the ranks."""

    def __init__(self, tape):
        super().__init__(persistent=tape._persistent)
        self._tape = tape._tape
        self._recording = tape._recording

    def gradient(self, target, sources, output_gradients=None, **kwargs):
        gradients = super().gradient(target, sources, output_gradients, **kwargs)
        flat = tf.nest.flatten(gradients)
        return tf.nest.pack_sequence_as(gradients, _fused_allreduce(flat))


def DistributedOptimizer(optimizer):
    """Wraps a Keras optimizer: gradients are averaged over the ranks before they are applied."""

    class _Distributed(optimizer.__class__):
        def apply(self, grads, trainable_variables=None):
            return super().apply(_fused_allreduce(list(grads)), trainable_variables)

    wrapped = _Distributed.from_config(optimizer.get_config())
    wrapped.__class__.__name__ = "Distributed" + optimizer.__class__.__name__
    return wrapped


try:
    import keras

    class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
        """Broadcasts root's model weights (and the optimizer's) before the first batch."""

        def __init__(self, root=0):
            super().__init__()
            self._root = root
            self._done = False

        def on_train_batch_begin(self, batch, logs=None):
            if self._done:
                return
            broadcast_variables(self.model.variables, self._root)
            self._done = True
except ImportError:  # Keras absent: the tape and the ops still work
    pass


@tf.RegisterGradient("ChorusAllreduce")
def _allreduce_gradient(operation, gradient):
    reduce_op = operation.get_attr("reduce_op").decode()
    if reduce_op not in ("sum", "avg"):
        return None  # min, max and prod have no gradient here
    return allreduce(gradient, reduce_op)


@tf.RegisterGradient("ChorusAllgather")
def _allgather_gradient(operation, gradient):
    # The sum of every rank's gradient, of which this rank keeps its own rows.
    rows = tf.shape(operation.inputs[0])[0:1]
    all_rows = allgather(rows)
    offset = tf.reduce_sum(all_rows[:rank()])
    summed = allreduce(gradient, "sum")
    return summed[offset:offset + rows[0]]


@tf.RegisterGradient("ChorusBroadcast")
def _broadcast_gradient(operation, gradient):
    summed = allreduce(gradient, "sum")
    return summed if rank() == operation.get_attr("root") else tf.zeros_like(summed)


@tf.RegisterGradient("ChorusReduceScatter")
def _reduce_scatter_gradient(operation, gradient):
    if operation.get_attr("reduce_op").decode() not in ("sum", "avg"):
        return None
    gathered = allgather(gradient)
    return gathered / size() if operation.get_attr("reduce_op").decode() == "avg" else gathered


@tf.RegisterGradient("ChorusAlltoall")
def _alltoall_gradient(operation, gradient):
    return alltoall(gradient)
