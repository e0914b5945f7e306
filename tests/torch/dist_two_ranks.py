"""Two torch.distributed ranks with the nccl backend on one GPU (Braid lets
two ranks share a GPU): all-reduce, broadcast, all-gather and barrier, each
result compared with the value computed here on the CPU.

Run with Braid preloaded (tests/torch/run.sh does):
    LD_PRELOAD=build/lib/libnccl.so.2 python tests/torch/dist_two_ranks.py
Without a GPU it prints why and exits 77 (skipped).
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
COUNT = 1000003  # odd, not a power of two


def expected_input(rank, n):
    # Distinct per rank and element, exact in float32.
    return (torch.arange(n, dtype=torch.float32) % 1021) * (rank + 1) + rank


def run(rank, port, errors):
    try:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", rank=rank, world_size=WORLD,
                                device_id=torch.device("cuda", 0))
        dev = torch.device("cuda", 0)

        x = expected_input(rank, COUNT).to(dev)
        dist.all_reduce(x)
        want = sum(expected_input(r, COUNT) for r in range(WORLD))
        assert torch.equal(x.cpu(), want), "all_reduce"

        b = expected_input(rank, COUNT).to(dev)
        dist.broadcast(b, src=1)
        assert torch.equal(b.cpu(), expected_input(1, COUNT)), "broadcast"

        outs = [torch.empty(COUNT, device=dev) for _ in range(WORLD)]
        dist.all_gather(outs, expected_input(rank, COUNT).to(dev))
        for r in range(WORLD):
            assert torch.equal(outs[r].cpu(), expected_input(r, COUNT)), "all_gather %d" % r

        dist.barrier()
        torch.cuda.synchronize()
        dist.destroy_process_group()
    except Exception as e:  # reported by the parent
        errors.put("rank %d: %r" % (rank, e))
        raise


def main():
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device is visible; this test needs one GPU")
        sys.exit(77)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    errors = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, port, errors)) for r in range(WORLD)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
    bad = [p.exitcode for p in procs if p.exitcode != 0]
    while not errors.empty():
        print(errors.get())
    if bad:
        print("FAILED: exit codes %s" % bad)
        sys.exit(1)
    print("PASSED: all_reduce, broadcast, all_gather, barrier on %d ranks" % WORLD)


if __name__ == "__main__":
    main()
