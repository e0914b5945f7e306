"""A stand-in for PyTorch, for tests/gpu/test_gpu_check.sh only: enough of
torch for torch_check.py's parent (versions, a device) and a worker whose
init_process_group prints a canned result instead of running anything.
STUB_MODE picks the result: "mixed" (default: rank 0 mapped the --lib file
and passes; rank 1 mapped another libnccl and one of its checks fails),
"pass" (both ranks pass) or "crash" (init_process_group raises)."""
__version__ = "0.0+stub"


class version:
    cuda = "0.0"


def device(*args):
    return args


from . import cuda, distributed  # noqa: E402,F401
