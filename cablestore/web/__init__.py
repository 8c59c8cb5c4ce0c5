"""The web archive of a store: ``cablestore web STORE``, a read-only site over its read methods.

A read-only local web application over :class:`cablestore.Store`'s read
methods: channels, a channel's messages (paged, newest first), a post with its
links both ways, users, the moderation state, search, and the store's status.
On a store ``cablestore serve`` holds it runs in the serving process, which
adds the connected peers and live channel pages.  aiohttp serves it, Jinja2
renders it with autoescaping, and one static script follows live pages
(see docs/web.md).  The names below are imported on first use, so the
command line does not load aiohttp to parse its arguments.
"""

from __future__ import annotations

import importlib

DEFAULT_LISTEN = "127.0.0.1:8080"

_LAZY = {"CSP": "app", "make_app": "app", "ServedWeb": "server", "WebThread": "server", "run_web": "server"}

__all__ = ["DEFAULT_LISTEN"]  # and, imported on first use: CSP, make_app (web.app), ServedWeb, WebThread, run_web (web.server)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f"cablestore.web.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'cablestore.web' has no attribute {name!r}")
