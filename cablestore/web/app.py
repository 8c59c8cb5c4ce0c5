"""The web archive's aiohttp application: routes, templates, headers, error pages.

Every route is a GET (HEAD too); any other method gets a 405 page.  Pages are
rendered by Jinja2 with autoescaping on, so every string from a post is
escaped; the one script is a static file, and the Content-Security-Policy
forbids inline script and any other origin.  A bad path or query is a 4xx
page, a failure a 500 page that says so: never a traceback.  The store is read
in a small thread pool, so a slow page never holds up the live streams; each
page reads one state of it (:mod:`cablestore.web.follow`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

import jinja2
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from cablestore.errors import ArgumentError, CableError, NotFoundError, QueryError, StoreClosedError
from cablestore.web import pages, search, status
from cablestore.web.follow import Followed, Held
from cablestore.web.live import LiveFeed

if TYPE_CHECKING:
    from cablestore.peer.node import Node
    from cablestore.store.store import Store
    from cablestore.web.names import Labels

log = logging.getLogger("cablestore.web")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"}
KEEPALIVE = 15.0  # seconds between comments on an idle live stream (a gone browser is noticed then)
READERS = 4  # threads reading the store for pages

STORE = web.AppKey("store", object)  # a follow.Held or follow.Followed: lease() gives a page its store and labels
NODE = web.AppKey("node", object)
FEED = web.AppKey("feed", object)
POOL = web.AppKey("pool", ThreadPoolExecutor)
TEMPLATES = web.AppKey("templates", jinja2.Environment)


def templates() -> jinja2.Environment:
    """The page templates, autoescaped (every ``{{ value }}`` is HTML-escaped unless marked safe, and none is)."""
    env = jinja2.Environment(loader=jinja2.PackageLoader("cablestore.web", "templates"), autoescape=True, undefined=jinja2.StrictUndefined)
    env.globals.update(channel_url=lambda name: "/channel/" + quote(name, safe=""), query=lambda **kw: urlencode({k: v for k, v in kw.items() if v}))
    return env


class _OneLineBadRequests(logging.Filter):
    """aiohttp logs a malformed request (a 100 KB URL, a bad header) with its traceback; one line says enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            record.msg, record.args, record.exc_info, record.exc_text = "%s: %s", (record.getMessage(), type(exc).__name__), None, None
        return True


_BAD_REQUESTS = _OneLineBadRequests()


def make_app(store: Store | Followed, *, node: Node | None = None) -> web.Application:
    """The web archive of ``store`` (one this process holds, or a :class:`Followed` one); ``node``: the serving peer (its peers on the status page, live channel pages)."""
    logging.getLogger("aiohttp.server").addFilter(_BAD_REQUESTS)  # (the same filter twice is kept once)
    app = web.Application(middlewares=[_pages_and_headers], client_max_size=64 * 1024)
    app[STORE], app[NODE], app[TEMPLATES] = store if isinstance(store, Followed) else Held(store), node, templates()
    app[POOL] = ThreadPoolExecutor(READERS, thread_name_prefix="cablestore-web")
    app[FEED] = None
    app.on_startup.append(_start_feed)
    app.on_shutdown.append(_stop_feed)
    app.on_cleanup.append(_stop_pool)
    get = app.router.add_get
    get("/", _page("channels.html", lambda store, labels, request: pages.channels(store)))
    get("/channel/{name:.+}", _page("channel.html", _channel))
    get("/post/{hash}", _page("post.html", lambda store, labels, request: pages.post(store, request.match_info["hash"], labels)))
    get("/users", _page("users.html", lambda store, labels, request: pages.users(store)))
    get("/moderation", _page("moderation.html", lambda store, labels, request: pages.moderation(store)))
    get("/status", _page("status.html", _status))
    get("/search", _page("search.html", lambda store, labels, request: search.results(store, request, labels)))
    get("/live/{name:.+}", _live)
    app.router.add_static("/static/", _static_dir(), append_version=False)
    return app


def _static_dir() -> str:
    from importlib.resources import files

    return str(files("cablestore.web") / "static")


async def _start_feed(app: web.Application) -> None:
    if app[NODE] is not None:  # only a served store gets new posts while the archive runs
        app[FEED] = LiveFeed(app[STORE].store, asyncio.get_running_loop())


async def _stop_feed(app: web.Application) -> None:
    if app[FEED] is not None:
        app[FEED].close()


async def _stop_pool(app: web.Application) -> None:
    app[POOL].shutdown(wait=False, cancel_futures=True)
    app[STORE].close()


def _one(request: web.Request, name: str) -> str | None:
    """A query parameter given at most once (twice is a 400)."""
    values = request.query.getall(name, [])
    if len(values) > 1:
        raise QueryError(f"{name} given {len(values)} times")
    return values[0] if values else None


def _channel(store, labels, request: web.Request) -> dict[str, Any]:
    name = pages.channel_name(request.match_info["name"])  # /channel/%23general too, as the CLI takes #general
    data = pages.channel(store, name, pages.parse_cursor(_one(request, "before")), pages.parse_count(_one(request, "n")), labels)
    data["live"] = "/live/" + quote(name, safe="") if request.app[NODE] is not None and data["first"] else None
    return data


def _status(store, labels, request: web.Request) -> dict[str, Any]:
    source = request.app[STORE]
    return status.status(store, request.app[NODE], str(source.path) if isinstance(source, Followed) else None)


def _page(template: str, read):
    """A route rendering ``template`` with ``read(store, labels, request)``, run in the reader pool on one state of the store."""

    async def handler(request: web.Request) -> web.Response:
        app = request.app
        data = await asyncio.get_running_loop().run_in_executor(app[POOL], partial(_leased, app[STORE], read, request))
        return _html(request, template, data)

    return handler


def _leased(source: Held | Followed, read, request: web.Request) -> dict[str, Any]:
    with source.lease() as (store, labels):
        return read(store, labels, request)


def _html(request: web.Request, template: str, data: dict, status_code: int = 200) -> web.Response:
    env = request.app[TEMPLATES]
    body = env.get_template(template).render(**data, served=request.app[NODE] is not None, path=request.path)
    return web.Response(text=body, status=status_code, content_type="text/html", charset="utf-8")


async def _live(request: web.Request) -> web.StreamResponse:
    """``text/event-stream`` of a channel's new post/texts, as JSON (``live.js`` adds them to the page with textContent)."""
    feed, held = request.app[FEED], request.app[STORE]
    if feed is None:
        raise NotFoundError("live updates come from a served store (cablestore web on a store cablestore serve holds)")
    name = request.match_info["name"]
    response = web.StreamResponse(headers={**HEADERS, "Content-Type": "text/event-stream", "Cache-Control": "no-store"})
    await response.prepare(request)
    queue = feed.watch(name)
    loop = asyncio.get_running_loop()
    try:
        while True:
            try:
                h = await asyncio.wait_for(queue.get(), KEEPALIVE)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if h is None:  # the feed closed, or this page fell behind
                break
            shown = await loop.run_in_executor(request.app[POOL], _live_post, held.store, held.labels, h)
            if shown is not None:
                await response.write(b"data: " + json.dumps(shown).encode() + b"\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        feed.unwatch(name, queue)
    return response


def _live_post(store, labels: Labels, h: bytes) -> dict | None:
    found = store.post(h)
    if found is None:
        return None
    shown = pages.Shown(found, labels([found.author])[found.author])
    return {"hash": shown.hash, "who": shown.label, "key": found.author.hex(), "time": shown.time, "text": shown.summary, "hidden": shown.hidden}


STATUS_OF = ((NotFoundError, 404), (ArgumentError, 400), (StoreClosedError, 503))


@web.middleware
async def _pages_and_headers(request: web.Request, handler) -> web.StreamResponse:
    """The security headers on every response; errors as pages with the right status, never a traceback."""
    if request.method not in ("GET", "HEAD"):
        response = _error(request, 405, "the web archive is read-only: only GET and HEAD")
        response.headers["Allow"] = "GET, HEAD"
    else:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            response = _error(request, exc.status, exc.reason)
        except CableError as exc:
            code = next((c for kind, c in STATUS_OF if isinstance(exc, kind)), 500)
            response = _error(request, code, plain(str(exc)))
        except Exception:  # noqa: BLE001 - logged here; the browser gets a page that says so, not a traceback
            log.exception("web page %s failed", request.path_qs)
            response = _error(request, 500, "this page failed; the server's log says why")
    if not response.prepared:
        response.headers.update(HEADERS)
    return response


_QUOTED = re.compile(r"""(?<![\w])'([^'\n]{0,200})'(?![\w])""")


def plain(message: str) -> str:
    """An error's message for a page: strings Python quoted (``'nosuch'``) in typographic quotes, first letter capital, a full stop."""
    text = _QUOTED.sub(lambda m: f"\u201c{m[1]}\u201d", message).strip()
    if text and text[0].islower():
        text = text[0].upper() + text[1:]
    return text if not text or text[-1] in ".!?)" else text + "."


def _error(request: web.Request, code: int, message: str) -> web.Response:
    try:
        return _html(request, "error.html", {"code": code, "message": message}, code)
    except Exception:  # noqa: BLE001 - a template that fails must still give an answer
        return web.Response(text=f"{code}: {message}", status=code, content_type="text/plain")
