"""Run by tf_test.sh as plain processes (a launcher would stop the survivors itself): the last
rank is killed in the middle of a loop of allreduces; every other rank must fail with Chorus's
error naming that rank, not hang. Each survivor prints "rank R: failed as expected: ..."."""
import os
import signal

import tensorflow as tf

import chorus_tf as ctf


def main():
    rank, size = ctf.init()
    victim = size - 1
    tensor = tf.ones([1 << 16])
    for step in range(1000):
        if rank == victim and step == 5:
            os.kill(os.getpid(), signal.SIGKILL)  # no goodbye: the peers see it vanish
        try:
            ctf.allreduce(tensor, "sum")
        except tf.errors.UnavailableError as error:
            if "chorus" in error.message and "rank %d" % victim in error.message:
                print("rank %d: failed as expected: %s" % (rank, error.message), flush=True)
                os._exit(0)
            raise
    print("rank %d: the victim's death went unnoticed" % rank, flush=True)
    os._exit(1)


if __name__ == "__main__":
    main()
