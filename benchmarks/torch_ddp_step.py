"""One DDP timing run, started by run_torch_ddp.sh under torchrun: a 4-layer MLP (about 3.2 M
parameters, 12.6 MB of float32 gradients) trained with the backend named by argv[1]; rank 0
prints "step_ms <median of the timed steps>"."""
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import chorus_torch  # noqa: F401  (registers the backend)

WARMUP, TIMED, BATCH, WIDTH = 5, 20, 32, 1024


def main():
    dist.init_process_group(sys.argv[1])
    torch.manual_seed(0)
    layers = []
    for _ in range(3):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU()]
    model = DistributedDataParallel(torch.nn.Sequential(*layers, torch.nn.Linear(WIDTH, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, targets = torch.randn(BATCH, WIDTH), torch.randint(0, 10, (BATCH,))
    times = []
    for step in range(WARMUP + TIMED):
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        if step >= WARMUP:
            times.append(time.perf_counter() - start)
    if dist.get_rank() == 0:
        print("step_ms %.2f" % (1000 * statistics.median(times)), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
