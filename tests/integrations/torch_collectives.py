"""Run by torch_test.sh under torchrun: every collective of the "chorus" backend, for every
dtype and reduce op it supports, against the same call on a gloo group of the same ranks.
Prints "rank R: ok" when every result matched; raises on the first mismatch."""
import os

import torch
import torch.distributed as dist

import chorus_torch  # noqa: F401  (registers the backend)

DTYPES = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]
GLOO_TYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.float32,
              torch.float64]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]


def data(rank, dtype, count=37, seed=0):
    generator = torch.Generator().manual_seed(1000 * seed + rank)
    values = torch.randint(1, 4, (count,), generator=generator)
    return values.to(dtype)


def same(a, b, what):
    if not torch.equal(a, b):
        raise AssertionError("%s differs from gloo: %s vs %s" % (what, a, b))


def main():
    dist.init_process_group("chorus")
    rank, size = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    assert dist.get_backend() == "chorus"

    for dtype in DTYPES:
        # gloo lacks int16 and bfloat16: it runs on a wider type there, exact for the small
        # values used, and its results are narrowed back.
        wide = dtype if dtype in GLOO_TYPES else (
            torch.float64 if dtype.is_floating_point else torch.int64)

        def on_gloo(*tensors):
            return [t.to(wide, copy=True) for t in tensors]

        for op in OPS:
            mine = data(rank, dtype)
            [theirs] = on_gloo(data(rank, dtype))
            dist.all_reduce(mine, op=op)
            dist.all_reduce(theirs, op=op, group=gloo)
            same(mine, theirs.to(dtype), "all_reduce %s %s" % (dtype, op))
        for root in range(size):
            mine = data(rank, dtype, seed=1)
            [theirs] = on_gloo(mine)
            dist.broadcast(mine, root)
            dist.broadcast(theirs, root, group=gloo)
            same(mine, theirs.to(dtype), "broadcast %s root %d" % (dtype, root))
            mine = data(rank, dtype, seed=2)
            [theirs] = on_gloo(mine)
            dist.reduce(mine, root, op=dist.ReduceOp.SUM)
            dist.reduce(theirs, root, op=dist.ReduceOp.SUM, group=gloo)
            if rank == root:
                same(mine, theirs.to(dtype), "reduce %s root %d" % (dtype, root))
        x = data(rank, dtype, seed=3)
        mine = [torch.empty_like(x) for _ in range(size)]
        theirs = on_gloo(*mine)
        dist.all_gather(mine, x)
        dist.all_gather(theirs, x.to(wide), group=gloo)
        gathered = torch.cat(theirs).to(dtype)
        same(torch.cat(mine), gathered, "all_gather %s" % dtype)
        into = torch.empty(size * x.numel(), dtype=dtype)
        dist.all_gather_into_tensor(into, x)
        same(into, gathered, "all_gather_into_tensor %s" % dtype)
        whole = data(rank, dtype, count=size * 5, seed=4)
        [expected] = on_gloo(whole)
        dist.all_reduce(expected, group=gloo)
        expected = expected.to(dtype)[rank * 5:(rank + 1) * 5]
        mine = torch.empty(5, dtype=dtype)
        dist.reduce_scatter_tensor(mine, whole)
        same(mine, expected, "reduce_scatter_tensor %s" % dtype)
        mine = torch.empty(5, dtype=dtype)
        dist.reduce_scatter(mine, list(whole.chunk(size)))
        same(mine, expected, "reduce_scatter %s" % dtype)
        send = data(rank, dtype, count=size * 3, seed=5)
        mine = torch.empty_like(send)
        [theirs, send_wide] = on_gloo(torch.empty_like(send), send)
        dist.all_to_all_single(mine, send)
        dist.all_to_all_single(theirs, send_wide, group=gloo)
        same(mine, theirs.to(dtype), "all_to_all_single %s" % dtype)
        # Uneven splits: rank r sends r + 1 rows to every peer.
        rows_in = [rank + 1] * size
        rows_out = [r + 1 for r in range(size)]
        send = data(rank, dtype, count=sum(rows_in) * 2, seed=6).view(-1, 2)
        mine = torch.empty(sum(rows_out), 2, dtype=dtype)
        [theirs, send_wide] = on_gloo(torch.empty_like(mine), send)
        dist.all_to_all_single(mine, send, rows_out, rows_in)
        dist.all_to_all_single(theirs, send_wide, rows_out, rows_in, group=gloo)
        same(mine, theirs.to(dtype), "all_to_all_single with splits %s" % dtype)
        blocks = [torch.empty_like(x) for _ in range(size)] if rank == 0 else None
        dist.gather(x, blocks, dst=0)
        if rank == 0:
            same(torch.cat(blocks), gathered, "gather %s" % dtype)
        scattered = torch.empty_like(x)
        dist.scatter(scattered, list(gathered.chunk(size)) if rank == 0 else None, src=0)
        same(scattered, x, "scatter %s" % dtype)
        # Point to point around a ring, and from any source.
        out, back = data(rank, dtype, seed=7), torch.empty_like(x)
        peer_to, peer_from = (rank + 1) % size, (rank - 1) % size
        request = dist.isend(out, peer_to, tag=3)
        dist.recv(back, peer_from, tag=3)
        request.wait()
        same(back, data(peer_from, dtype, seed=7), "send/recv %s" % dtype)
        if rank == 0:
            for _ in range(size - 1):
                got = torch.empty_like(x)
                source = dist.recv(got, tag=4)
                same(got, data(source, dtype, seed=8), "recv from any %s" % dtype)
        else:
            dist.send(data(rank, dtype, seed=8), 0, tag=4)
        dist.barrier()

    # Work objects complete through their futures too.
    value = torch.ones(4) * (rank + 1)
    future = dist.all_reduce(value, async_op=True).get_future()
    result = future.wait()[0]
    same(result, torch.ones(4) * sum(range(1, size + 1)), "all_reduce future")
    dist.destroy_process_group()
    print("rank %d: ok" % rank, flush=True)


if __name__ == "__main__":
    main()
