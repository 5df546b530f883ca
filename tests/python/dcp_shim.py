"""Import before torch: lets torch 1.13's `torch.distributed._shard` (DCP) import on Python
>= 3.11. A dataclass field there defaults to a TensorProperties() instance, which 3.11
rejects as a mutable default; this turns such defaults into default_factory copies, which
changes nothing torch writes. Used by the tests that make real DCP checkpoints."""

import copy
import dataclasses

_process_class = dataclasses._process_class


def _factory_defaults(cls, *args, **kwargs):
    for name in list(cls.__dict__.get("__annotations__", {})):
        value = cls.__dict__.get(name)
        default = value.default if isinstance(value, dataclasses.Field) else value
        if dataclasses.is_dataclass(default) and not isinstance(default, type) and type(default).__hash__ is None:
            setattr(cls, name, dataclasses.field(default_factory=lambda d=default: copy.deepcopy(d)))
    return _process_class(cls, *args, **kwargs)


dataclasses._process_class = _factory_defaults
