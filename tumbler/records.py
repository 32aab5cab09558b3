"""``@record``: a class of annotated fields made a named tuple, without
``typing``.

``typing.NamedTuple``'s class syntax is the clearest way to write a record
(a field per line, its type and its comment beside it), but importing
``typing`` costs ~8 ms of CPU on a small VM (it brings ``re``, ``enum``,
``functools``, ``contextlib``), paid by every ``tumbler exec`` while its
command runs (BENCHMARKS.md, issue 15).  So the platform layer, the engine,
the loop and the state write their records as::

    from __future__ import annotations      # annotations stay strings

    @record
    class Move:
        tid: int
        src: int | None
        dst: int = 0

and get a ``collections.namedtuple`` subclass with those fields, defaults,
docstring and methods: immutable, cheap to build (one per thread per
round), ``_replace`` and ``_asdict`` included.  The annotations are never
evaluated.  A method of such a class cannot use zero-argument ``super()``
(the class it names is replaced); none needs to.

Pure Python, no OS: the one module outside the engine the engine imports.
"""

from collections import namedtuple

_NOT_COPIED = ("__dict__", "__weakref__", "__annotations__")


def record(cls):
    """The named tuple type for the class body ``cls`` (see the module doc)."""
    body = cls.__dict__
    fields = list(body.get("__annotations__", {}))
    defaults = [body[name] for name in fields if name in body]
    if defaults and any(name not in body for name in fields[len(fields) - len(defaults):]):
        raise TypeError("%s: a field without a default follows one with a default"
                        % cls.__name__)
    base = namedtuple(cls.__name__, fields, defaults=defaults, module=cls.__module__)
    namespace = {key: value for key, value in body.items()
                 if key not in fields and key not in _NOT_COPIED}
    namespace["__slots__"] = ()
    made = type(cls.__name__, (base,), namespace)
    made.__qualname__ = cls.__qualname__
    return made
