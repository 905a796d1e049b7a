"""Run by torch_test.sh as plain processes with torchrun's environment variables (torchrun
would stop the survivors itself): the last rank exits abruptly in the middle of a
training loop of allreduces; every other rank must fail with Chorus's error naming that rank,
not hang. Each survivor prints "rank R: failed as expected: <message>"."""
import os
import sys

import torch
import torch.distributed as dist

import chorus_torch  # noqa: F401  (registers the backend)


def main():
    dist.init_process_group("chorus")
    rank, size = dist.get_rank(), dist.get_world_size()
    victim = size - 1
    tensor = torch.ones(1 << 16)
    for step in range(1000):
        if rank == victim and step == 5:
            os._exit(9)  # no goodbye: the peers see the connection drop
        try:
            dist.all_reduce(tensor)
        except RuntimeError as error:
            message = str(error)
            if "chorus" in message and "rank %d" % victim in message:
                print("rank %d: failed as expected: %s" % (rank, message), flush=True)
                os._exit(0)
            raise
        tensor.fill_(1)
    print("rank %d: the victim's death went unnoticed" % rank, flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
