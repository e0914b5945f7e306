"""torch.cuda of the stand-in (see torch/__init__.py)."""


def is_available():
    return True


def get_device_name(index):
    return "Stand-in GPU"


def set_device(index):
    pass
