"""torch.distributed of the stand-in (see torch/__init__.py)."""
import json
import os
import sys


def is_available():
    return True


def is_nccl_available():
    return True


def init_process_group(backend, rank, world_size):
    mode = os.environ.get("STUB_MODE", "mixed")
    if mode == "crash":
        raise RuntimeError("ncclInvalidUsage: the stand-in refuses")
    lib = os.path.realpath(os.environ["LD_PRELOAD"].split()[0])
    good = mode == "pass" or rank == 0
    print("NCCL version 2.28.9+stand-in", flush=True)
    res = {"rank": rank, "errors": [], "torch_nccl_version": "2.28.9", "torch": "stub",
           "libnccl_mapped": [lib] if good else ["/elsewhere/libnccl.so.2"],
           "checks": {"all_reduce float32 sum": {"pass": True, "detail": ""},
                      "broadcast root 1": {"pass": good, "detail": "" if good else "nccl [1.0] vs gloo [2.0]"}}}
    print("TORCH_CHECK_RESULT " + json.dumps(res), flush=True)
    sys.exit(0 if good else 1)
