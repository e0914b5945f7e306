#!/usr/bin/env python3
"""PyTorch's torch.distributed on Braid: two processes on one GPU.

    tests/gpu/torch_check.py --lib PATH/libnccl.so.2 [--nranks 2] [--timeout S]

Starts NRANKS processes (default 2) of this script, each with LD_PRELOAD of
Braid's libnccl.so.2 and device cuda:0, so every rank shares the one GPU.
Each makes a process group on the "nccl" backend (Braid, through the
preload) and one on "gloo", and runs on both, with the same inputs:
all_reduce (float32 sum, int32 max), broadcast (root 1), all_gather,
reduce_scatter (gloo has none: its reference is a gloo all_reduce, sliced),
barrier, and five steps of a small DistributedDataParallel model (SGD). Each
result on nccl must equal gloo's (collectives: exactly, the inputs are small
integers; DDP parameters: to 1e-5, the model's own arithmetic runs on the GPU
for one and the CPU for the other).

Each rank reports which libnccl.so.2 its process mapped (/proc/self/maps),
torch.cuda.nccl.version() and the library's "NCCL version" banner
(NCCL_DEBUG=VERSION); a rank that did not load the --lib file fails.

Exit: 0 all passed; 1 a failure (the first lines of each rank's output are
printed); 77 after "SKIP: ..." when torch, CUDA or a GPU is missing. A
missing --lib is a failure, not a skip, so a wrong path is caught without
a GPU. Standard library only in the parent; torch in the workers.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

SKIP = 77


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mapped_nccl():
    """Paths of every libnccl* this process has mapped."""
    paths = set()
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            for line in f:
                p = line.split(None, 5)
                if len(p) == 6 and "libnccl" in os.path.basename(p[5].strip()):
                    paths.add(os.path.realpath(p[5].strip()))
    except OSError:
        pass
    return sorted(paths)


# ---------------------------------------------------------------- worker
def worker(rank, nranks):
    import torch
    import torch.distributed as dist

    res = {"rank": rank, "checks": {}, "errors": []}

    def check(name, ok, detail=""):
        res["checks"][name] = {"pass": bool(ok), "detail": detail}

    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    dist.init_process_group("nccl", rank=rank, world_size=nranks)
    gloo = dist.new_group(backend="gloo")

    def both(fn_nccl, fn_gloo, name):
        try:
            a = fn_nccl()
            torch.cuda.synchronize()
            b = fn_gloo()
            ok = torch.equal(a.cpu(), b.cpu())
            detail = "" if ok else f"nccl {a.flatten()[:4].tolist()} vs gloo {b.flatten()[:4].tolist()}"
            check(name, ok, detail)
        except Exception as e:  # the failure is the finding
            check(name, False, f"{type(e).__name__}: {e}")

    n = (1 << 20) + 3
    base = torch.arange(n, dtype=torch.float32).remainder(97) + rank

    def ar_f32(group, device):
        t = base.clone().to(device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=group)
        return t

    both(lambda: ar_f32(None, dev), lambda: ar_f32(gloo, "cpu"), "all_reduce float32 sum")

    ibase = (torch.arange(4099, dtype=torch.int32) * (rank + 3)).remainder(1009)

    def ar_max(group, device):
        t = ibase.clone().to(device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return t

    both(lambda: ar_max(None, dev), lambda: ar_max(gloo, "cpu"), "all_reduce int32 max")

    root = 1 % nranks

    def bcast(group, device):
        t = (torch.arange(65536 + 5, dtype=torch.float32) * (rank + 1)).to(device)
        dist.broadcast(t, src=root, group=group)
        return t

    both(lambda: bcast(None, dev), lambda: bcast(gloo, "cpu"), f"broadcast root {root}")

    def ag(group, device):
        t = (torch.arange(1000, dtype=torch.float32) + 1000 * rank).to(device)
        out = [torch.empty_like(t) for _ in range(nranks)]
        dist.all_gather(out, t, group=group)
        return torch.cat(out)

    both(lambda: ag(None, dev), lambda: ag(gloo, "cpu"), "all_gather")

    def ag_tensor():
        t = (torch.arange(1000, dtype=torch.float32) + 1000 * rank).to(dev)
        out = torch.empty(1000 * nranks, dtype=torch.float32, device=dev)
        dist.all_gather_into_tensor(out, t)
        return out

    both(ag_tensor, lambda: ag(gloo, "cpu"), "all_gather_into_tensor")

    chunk = 4096 + 1
    rs_in = (torch.arange(chunk * nranks, dtype=torch.float32).remainder(31) + 2 * rank)

    def rs_nccl():
        out = torch.empty(chunk, dtype=torch.float32, device=dev)
        dist.reduce_scatter_tensor(out, rs_in.to(dev), op=dist.ReduceOp.SUM)
        return out

    def rs_gloo():
        t = rs_in.clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=gloo)
        return t[rank * chunk:(rank + 1) * chunk]

    both(rs_nccl, rs_gloo, "reduce_scatter_tensor float32 sum")

    try:
        t0 = time.monotonic()
        dist.barrier()
        torch.cuda.synchronize()
        check("barrier", True, f"{(time.monotonic() - t0) * 1e3:.1f} ms")
    except Exception as e:
        check("barrier", False, f"{type(e).__name__}: {e}")

    # DDP: the same model and data on both backends.
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP

        def train(device, group, on_gpu):
            torch.manual_seed(1234)
            model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(),
                                        torch.nn.Linear(128, 10)).to(device)
            ddp = DDP(model, device_ids=[0] if on_gpu else None, process_group=group)
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
            g = torch.Generator().manual_seed(100 + rank)
            losses = []
            for _ in range(5):
                x = torch.randn(32, 64, generator=g).to(device)
                y = torch.randint(0, 10, (32,), generator=g).to(device)
                opt.zero_grad()
                loss = torch.nn.functional.cross_entropy(ddp(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
            return [p.detach().cpu() for p in model.parameters()], losses

        p_nccl, l_nccl = train(dev, None, True)
        p_gloo, l_gloo = train("cpu", gloo, False)
        worst = max(float((a - b).abs().max()) for a, b in zip(p_nccl, p_gloo))
        ok = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(p_nccl, p_gloo))
        check("DDP 5 SGD steps, parameters nccl vs gloo", ok,
              f"max |diff| {worst:.2e}; losses nccl {[round(v, 4) for v in l_nccl]}")
        # Every rank holds the same parameters afterwards (DDP's promise).
        flat = torch.cat([p.flatten() for p in p_nccl]).to(dev)
        peers = [torch.empty_like(flat) for _ in range(nranks)]
        dist.all_gather(peers, flat)
        same = all(torch.equal(peers[0], q) for q in peers)
        check("DDP parameters equal on every rank", same)
    except Exception as e:
        check("DDP 5 SGD steps, parameters nccl vs gloo", False, f"{type(e).__name__}: {e}")

    res["libnccl_mapped"] = mapped_nccl()
    try:
        res["torch_nccl_version"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception as e:
        res["torch_nccl_version"] = f"error: {e}"
    res["torch"] = torch.__version__
    try:
        dist.destroy_process_group()
    except Exception as e:
        res["errors"].append(f"destroy_process_group: {e}")
    print("TORCH_CHECK_RESULT " + json.dumps(res), flush=True)
    return 0 if all(c["pass"] for c in res["checks"].values()) else 1


# ---------------------------------------------------------------- parent
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", help="Braid's libnccl.so.2, preloaded into each rank")
    ap.add_argument("--nranks", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=150.0,
                    help="seconds for all ranks together (default 150)")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker is not None:
        return worker(a.worker, a.nranks)

    if not a.lib:
        print("torch_check: --lib PATH (Braid's libnccl.so.2) is required", file=sys.stderr)
        return 2
    lib = os.path.realpath(a.lib)
    if not os.path.isfile(lib):
        print(f"FAIL: torch_check: --lib {a.lib} does not exist; build it first "
              "(scripts/gpu-check --prepare)")
        return 1
    if a.nranks < 1 or a.nranks > 8:
        print("torch_check: --nranks wants 1 to 8", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError as e:
        print(f"SKIP: torch_check: PyTorch is not installed for {sys.executable} ({e})")
        return SKIP
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_nccl_available():
        print(f"SKIP: torch_check: torch {torch.__version__} has no distributed nccl backend")
        return SKIP
    if not torch.cuda.is_available():
        print(f"SKIP: torch_check: torch {torch.__version__} sees no CUDA device")
        return SKIP
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"{torch.cuda.get_device_name(0)}; {a.nranks} ranks on cuda:0, LD_PRELOAD={lib}",
          flush=True)

    env = dict(os.environ)
    env["LD_PRELOAD"] = lib + (" " + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(a.nranks), NCCL_DEBUG=env.get("NCCL_DEBUG", "VERSION"),
               PYTHONUNBUFFERED="1", TORCH_NCCL_ASYNC_ERROR_HANDLING="1",
               BRAID_TIMEOUT=env.get("BRAID_TIMEOUT", "60"))
    procs = []
    for r in range(a.nranks):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", str(r),
             "--nranks", str(a.nranks)],
            env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    deadline = time.monotonic() + a.timeout
    outs = []
    timed_out = False
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            for q in procs:
                q.kill()
            out, _ = p.communicate()
        outs.append((p.returncode, out or ""))

    failed = timed_out
    for r, (rc, out) in enumerate(outs):
        res = None
        for line in out.splitlines():
            if line.startswith("TORCH_CHECK_RESULT "):
                res = json.loads(line[len("TORCH_CHECK_RESULT "):])
        banner = next((l.strip() for l in out.splitlines() if "NCCL version" in l), "no banner")
        if res is None:
            failed = True
            why = "timed out" if timed_out else f"exit {rc}"
            print(f"FAIL: rank {r}: no result ({why}); its output:")
            for line in out.splitlines()[-25:]:
                print(f"    | {line}")
            continue
        mapped = res.get("libnccl_mapped", [])
        used_braid = lib in mapped
        print(f"rank {r}: libnccl mapped: {', '.join(mapped) or 'none'}"
              f" ({'Braid' if used_braid else 'NOT Braid'}); torch.cuda.nccl.version() "
              f"{res.get('torch_nccl_version')}; banner: {banner}")
        if not used_braid:
            failed = True
            print(f"FAIL: rank {r}: the process did not map {lib} (LD_PRELOAD did not take)")
        for name, c in res["checks"].items():
            print(f"  {'PASS' if c['pass'] else 'FAIL'}: rank {r}: {name}"
                  + (f" ({c['detail']})" if c["detail"] else ""))
            failed |= not c["pass"]
        if rc != 0 and all(c["pass"] for c in res["checks"].values()):
            failed = True
            print(f"FAIL: rank {r}: exit {rc} after its checks; last lines:")
            for line in out.splitlines()[-10:]:
                print(f"    | {line}")
    print(("FAIL" if failed else "PASS") + f": torch_check: {a.nranks} ranks, nccl (Braid) "
          "against gloo")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
