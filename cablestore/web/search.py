"""The search page: ``Store.search`` hits (post/texts and post/topics), newest first, their matches cut into marked and unmarked pieces.

The template marks each matched span with ``<mark>``; the pieces are plain
strings, escaped like every other value, so a match never lets markup through.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from cablestore.errors import QueryError, SearchNotEnabledError
from cablestore.search.query import marked, parse
from cablestore.web import pages

if TYPE_CHECKING:
    from aiohttp import web

    from cablestore.store.store import Store
    from cablestore.web.names import Labels

MAX_QUERY = 1000  # characters of a search query


def results(store: Store, request: web.Request, labels: Labels | None = None) -> dict[str, Any]:
    """The search form's answer: ``q`` (the query language), ``channel``, ``hidden=1`` to include hidden posts, ``cursor``."""
    query = request.query
    for name in ("q", "channel", "cursor", "hidden"):
        if len(query.getall(name, [])) > 1:
            raise QueryError(f"{name} given more than once")
    q, channel, cursor = query.get("q", "").strip(), query.get("channel") or None, query.get("cursor") or None
    include_hidden = query.get("hidden") == "1"
    data: dict[str, Any] = {"q": q, "channel": channel or "", "hidden": include_hidden, "hits": [], "next": None, "notice": None}
    if len(q) > MAX_QUERY:
        raise QueryError(f"a search query is at most {MAX_QUERY} characters")
    if not q:
        return data
    for who in parse(q).authors:  # from: names one user, as every command names users (a 400 page lists the candidates)
        store.resolve_user(who)
    try:
        page = store.search(q, channel=channel, include_hidden=include_hidden, cursor=cursor, limit=pages.PAGE_SIZE)
    except SearchNotEnabledError:
        data["notice"] = "this store keeps no search index: `cablestore search --enable STORE` builds it"
        return data
    listed = pages.shown(store, list(page), labels)
    data["hits"] = [(s, marked(s.post.searched, s.post.spans)) for s in listed]
    data["next"] = page.next
    return data
