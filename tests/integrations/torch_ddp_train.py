"""Run by torch_test.sh under torchrun: trains a small model with DistributedDataParallel for
a few dozen steps, each rank on its shard of one synthetic batch, with the backend named by
argv[1] ("chorus" or "gloo"), and writes the per-step losses (rank 0) and a digest of the final
parameters (every rank) to argv[2]-rank<R>.json. torch_test.sh compares the two backends."""
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import chorus_torch  # noqa: F401  (registers the backend)

STEPS = 30
BATCH = 64


def main():
    backend, output = sys.argv[1], sys.argv[2]
    dist.init_process_group(backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    # Different starting weights per rank: DDP must broadcast rank 0's.
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(rank * 0.01)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(BATCH, 16, generator=generator)
    targets = torch.randint(0, 4, (BATCH,), generator=generator)
    shard = slice(rank * BATCH // size, (rank + 1) * BATCH // size)
    losses = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(inputs[shard]), targets[shard])
        loss.backward()
        optimizer.step()
        # The loss of the whole batch: the mean of the shards' (equal shards).
        whole = loss.detach().clone()
        dist.all_reduce(whole)
        losses.append(whole.item() / size)
    parameters = torch.cat([p.detach().view(-1) for p in model.parameters()])
    with open("%s-rank%d.json" % (output, rank), "w") as f:
        json.dump({"losses": losses, "parameters": parameters.tolist()}, f)
    # Every rank done before any tears its process group down (gloo's teardown has hung when
    # one rank closed its pairs while another still finished).
    dist.barrier()
    dist.destroy_process_group()
    print("rank %d: ok" % rank, flush=True)
    if backend == "gloo":
        # The reference run's results are complete. Gloo's process group lives on in DDP's
        # reducer until main returns, and a gloo run has (rarely) hung past this point, beyond
        # the test's bound: gloo's teardown is not what this test checks. Chorus's runs end
        # normally, since their teardown is ours.
        os._exit(0)


if __name__ == "__main__":
    main()
