"""Grad mode: ``with nx.no_grad():`` records nothing; also usable as a decorator."""

from __future__ import annotations

import functools

from . import _C


class no_grad:
    """Context manager (and decorator) that disables gradient recording in this thread."""

    def __enter__(self):
        self._prev = _C.is_grad_enabled()
        _C.set_grad_enabled(False)
        return self

    def __exit__(self, *exc) -> None:
        _C.set_grad_enabled(self._prev)

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)

        return wrapper


def is_grad_enabled() -> bool:
    return _C.is_grad_enabled()
