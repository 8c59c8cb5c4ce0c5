"""Old spellings of the public API, kept working for one release with a ``DeprecationWarning``.

See ``CHANGELOG.md`` for what was renamed and when it goes.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from cablestore.errors import ArgumentError


def renamed_keyword(old: str, new: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Let a method still take ``old=`` as a keyword for ``new=``, warning that it is deprecated."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def wrapper(*args: Any, **kw: Any) -> Any:
            if old in kw:
                if new in kw:
                    # ArgumentError is a TypeError too: what Python raises for a keyword given twice
                    raise ArgumentError(f"{func.__name__}() got both {old}= and {new}=")
                warnings.warn(f"{func.__name__}({old}=...) is deprecated: use {new}=", DeprecationWarning, stacklevel=2)
                kw[new] = kw.pop(old)
            return func(*args, **kw)

        return wrapper

    return decorate
