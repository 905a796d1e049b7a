"""Run by tf_test.sh as chorusrun ranks: a small Keras model trained on synthetic data, each
rank on its shard of one batch, two ways:
  - a custom loop with DistributedGradientTape, 30 steps: after every step every rank's
    weights are identical, and the loss and weights equal single-process training on the
    whole batch (computed here too) within float tolerance;
  - model.fit with DistributedOptimizer and BroadcastGlobalVariablesCallback, 10 epochs:
    the final weights are identical on every rank and equal a single-process fit.
Prints "rank R: ok"."""
import numpy as np
import tensorflow as tf
import keras

import chorus_tf as ctf

STEPS, EPOCHS, BATCH = 30, 10, 64


def model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                             keras.layers.Dense(4)])


def flat(variables):
    return np.concatenate([np.asarray(v).reshape(-1) for v in variables])


def same_everywhere(weights, what):
    gathered = np.asarray(ctf.allgather(tf.constant(weights[None, :])))
    if not all(np.array_equal(gathered[0], row) for row in gathered):
        raise AssertionError("%s: the ranks' weights differ" % what)


def close(a, b, what):
    # float32 sums in another order: equal within a few units in the last place.
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not np.allclose(a, b, rtol=1e-4, atol=1e-5):
        raise AssertionError("%s: differs from single-process training by up to %g"
                             % (what, np.max(np.abs(a - b))))


def main():
    rank, size = ctf.init()
    generator = np.random.default_rng(7)
    inputs = generator.normal(size=(BATCH, 8)).astype(np.float32)
    labels = generator.integers(0, 4, size=BATCH)
    shard = slice(rank * BATCH // size, (rank + 1) * BATCH // size)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # A custom loop with DistributedGradientTape; starting weights differ per rank until the
    # broadcast.
    net, reference = model(rank), model(100)
    ctf.broadcast_variables(net.variables, root=0)
    for variable, value in zip(reference.variables, net.variables):
        variable.assign(value)
    optimizer, reference_optimizer = keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1)
    for step in range(STEPS):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels[shard], net(inputs[shard]))
        tape = ctf.DistributedGradientTape(tape)
        optimizer.apply_gradients(zip(tape.gradient(loss, net.trainable_variables),
                                      net.trainable_variables))
        with tf.GradientTape() as tape:
            reference_loss = loss_fn(labels, reference(inputs))
        reference_optimizer.apply_gradients(zip(
            tape.gradient(reference_loss, reference.trainable_variables),
            reference.trainable_variables))
        whole_loss = ctf.allreduce(loss, "avg")
        close(whole_loss, reference_loss, "tape loss at step %d" % step)
        same_everywhere(flat(net.variables), "tape step %d" % step)
        close(flat(net.variables), flat(reference.variables), "tape weights at step %d" % step)

    # model.fit with the optimizer wrapper and the broadcast callback.
    net, reference = model(rank + 10), model(10)
    net.compile(optimizer=ctf.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss=loss_fn)
    reference.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss_fn)
    net.fit(inputs[shard], labels[shard], batch_size=BATCH // size, epochs=EPOCHS, verbose=0,
            shuffle=False, callbacks=[ctf.BroadcastGlobalVariablesCallback(0)])
    reference.fit(inputs, labels, batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=False)
    same_everywhere(flat(net.trainable_variables), "fit")
    close(flat(net.trainable_variables), flat(reference.trainable_variables), "fit weights")
    print("rank %d: ok" % rank, flush=True)


if __name__ == "__main__":
    main()
