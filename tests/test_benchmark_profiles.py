"""The profiles docs/performance.md quotes count what they say they count."""

from __future__ import annotations

import re

from cablestore import Store
from cablestore.authoring.workload import iter_posts

from .conftest import NOW


def _table(text: str) -> dict[str, tuple[float, float, float]]:
    rows = re.findall(r"^\| `([^`]+)` \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", text, re.M)
    return {name: (float(p), float(d), float(a)) for name, p, d, a in rows}


def test_profile_writes_counts_each_posts_puts_and_deletes(tmp_path, capsys):
    from benchmarks.profile import _posts_file, count_writes

    count_writes(tmp_path, 2000, 1)
    out = capsys.readouterr().out
    posts, per_post = re.search(r"^([\d,]+) posts: ([\d.]+) writes a post", out, re.M).groups()
    rows = _table(out)
    n = int(posts.replace(",", ""))
    puts, deletes, absent = rows["!post!"]
    assert 0 < deletes < puts <= 1  # the workload deletes a few of its posts
    for family, (_, d, a) in rows.items():
        assert a <= d, family  # deletes of absent keys are some of the deletes
    assert abs(sum(p + d for p, d, _ in rows.values()) - float(per_post)) <= 0.001 * len(rows)
    # What the batches wrote is what a store holds: the posts put, less the
    # deletes of posts an earlier batch had stored.
    with Store(tmp_path / "s", verify_signatures=False, now=lambda: NOW) as s:
        for chunk in iter_posts(_posts_file(tmp_path, 2000, 1), 1000):
            s.ingest_many(chunk)
        held = sum(1 for _ in s.db.iterator(prefix=b"!post!", include_value=False))
    assert abs((puts - (deletes - absent)) * n - held) <= 3  # the table rounds to 0.001 a post


def test_recon_ingest_compares_a_store_with_the_range_sums_and_one_without(tmp_path):
    """benchmarks.recon_ingest offers both stores every post, and only the one "with" holds !recon rows; the hooks are restored after."""
    from benchmarks import recon_ingest
    from cablestore.authoring.workload import Workload, write_posts
    from cablestore.keyspace.keys import RECON
    from cablestore.store.write import batch as batch_module
    from cablestore.views import recon

    posts_file = tmp_path / "posts.bin"
    write_posts(posts_file, Workload(3, 600))
    shipped = (recon.add, batch_module.IndexState._write_sums)
    batches = list(iter_posts(posts_file, 100))
    result = recon_ingest.interleaved(tmp_path / "run", batches, verify=False)
    assert (recon.add, batch_module.IndexState._write_sums) == shipped
    assert result["rows"] > 0 and result["seconds"][True] > 0 and result["seconds"][False] > 0
    with Store(tmp_path / "run" / "with", verify_signatures=False, now=lambda: NOW) as a, Store(tmp_path / "run" / "without", verify_signatures=False, now=lambda: NOW) as b:
        assert sum(1 for _ in b.db.iterator(prefix=RECON)) == 0
        assert a.check().consistent  # the store "with" is a store as shipped
        assert [k for k, _ in a.items() if not k.startswith(RECON)] == [k for k, _ in b.items()]
    assert result["posts"] == 600  # every post offered, counted once (the store "with")
