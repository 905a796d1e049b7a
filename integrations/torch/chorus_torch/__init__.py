"""torch.distributed backend "chorus": importing this module registers it.

    import chorus_torch  # noqa: F401
    torch.distributed.init_process_group("chorus")   # under torchrun, or with CHORUS_STORE

The ranks meet through Chorus's own store: CHORUS_STORE if set, else a TCP store on
MASTER_ADDR:MASTER_PORT+1 that rank 0 serves (MASTER_PORT stays PyTorch's). The device is
CHORUS_TRANSPORT's (default auto: shared memory within a host, TCP between hosts).
docs/integrations.md lists what is supported."""
import torch.distributed as dist

from chorus_torch._C import ProcessGroupChorus


def _create(store, rank, world_size, timeout):
    # torch's store is not used: Chorus keeps its own (see above), so a job needs nothing new.
    del store
    return ProcessGroupChorus(rank, world_size, timeout)


dist.Backend.register_backend("chorus", _create)

__all__ = ["ProcessGroupChorus"]
