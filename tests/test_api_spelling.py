"""One spelling per idea in the public API: ``channel=`` everywhere, hashes as bytes or hex, plyvel's ``get(key, default)``."""

from __future__ import annotations

import inspect
import re
import warnings

import pytest

import cablestore
from cablestore import JOIN, TEXT, TOPIC, Store, errors, post_hash

from .conftest import post


@pytest.fixture
def general(store, alice):
    bufs = [post(alice, JOIN, 1, channel="general"), post(alice, TOPIC, 2, channel="general", topic="t"), post(alice, TEXT, 3, channel="general", text="hi")]
    for b in bufs:
        store.ingest(b)
    return [post_hash(b) for b in bufs]


CHANNEL_METHODS = ["channel_time_range", "channel_state", "members", "topic", "messages", "heads", "posts", "learn_listing"]


def test_every_channel_parameter_is_spelled_channel():
    for name in CHANNEL_METHODS:
        params = list(inspect.signature(getattr(Store, name)).parameters)
        assert params[1] == "channel", name


@pytest.mark.parametrize("method", ["channel_time_range", "channel_state", "members", "topic"])
def test_the_old_name_keyword_still_works_with_a_deprecation_warning(store, general, method):
    new = getattr(store, method)(channel="general")
    with pytest.warns(DeprecationWarning, match="channel="):
        old = getattr(store, method)(name="general")
    assert old == new
    with pytest.raises(errors.ArgumentError, match="got both name= and channel=") as both:
        getattr(store, method)(name="general", channel="general")
    assert isinstance(both.value, TypeError)  # still caught by code that caught the TypeError raised before


def test_the_new_keyword_does_not_warn(store, general):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert store.topic(channel="general") == "t"


def test_get_takes_a_default_like_plyvel(store, general):
    missing = bytes(32)
    assert store.get(missing) is None
    assert store.get(missing, b"nothing") == b"nothing"
    assert store.get(general[0], b"nothing") != b"nothing"


def test_hashes_are_accepted_as_hex_everywhere(store, general):
    h = general[2]
    assert store.get(h.hex()) == store.get(h)
    assert store.get_many([h.hex()]) == store.get_many([h])
    assert store.post(h.hex()) == store.post(h)
    assert store.links(h.hex()) == store.links(h)
    assert store.tombstones_made_by(h.hex(), [h.hex()]) == store.tombstones_made_by(h, [h])
    alice_key = store.post(h).author
    assert store.author_posts(alice_key.hex()) == store.author_posts(alice_key)


def test_the_package_page_lists_every_error_class():
    classes = [n for n, c in vars(errors).items() if isinstance(c, type) and issubclass(c, errors.CableError)]
    assert len(classes) > 30
    listed = set(re.findall(r"``(\w+)``", cablestore.__doc__))
    assert set(classes) <= listed
    assert all(getattr(cablestore, n) is getattr(errors, n) for n in classes)
