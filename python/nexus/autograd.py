"""Grad mode: ``with nx.no_grad():`` records nothing; also usable as a decorator."""

from __future__ import annotations

import functools

from . import _C


class no_grad:
    """Disables gradient recording in this thread: a context manager and a decorator, as torch's.

        with nx.no_grad():
            y = model(x)          # records nothing

        @nx.no_grad               # or @nx.no_grad()
        def evaluate(x): ...
    """

    def __new__(cls, fn=None):
        if fn is None:
            return super().__new__(cls)
        if not callable(fn):
            raise TypeError(f"no_grad takes no arguments (or decorates a function), got "
                            f"{type(fn).__name__}")
        return cls()(fn)

    def __enter__(self):
        self._prev = _C.is_grad_enabled()
        _C.set_grad_enabled(False)
        return self

    def __exit__(self, *exc) -> None:
        _C.set_grad_enabled(self._prev)

    def __call__(self, fn):
        """Decorates ``fn`` so that its body runs under no_grad."""
        if not callable(fn):
            raise TypeError(f"no_grad() decorates a function, got {type(fn).__name__}")

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)

        return wrapper


def is_grad_enabled() -> bool:
    """Whether operations in this thread record gradients (False inside no_grad)."""
    return _C.is_grad_enabled()
