"""The benchmark chart: ingest rate and memory against store size, rebuild time against posts.

Needs matplotlib (``pip install -e '.[bench]'``); ``python -m benchmarks``
skips the chart without it.
"""

from __future__ import annotations

from pathlib import Path

INGESTS = (("trusted_reindex", "trusted ingest"), ("verified_ingest", "verified ingest"), ("verified_ingest_workers", "verified, 2 workers"))


def draw(results: list[dict], path: Path, largest: dict | None = None) -> None:
    """Write a three-panel PNG for ``results`` (one dict per store size, from ``benchmarks.run``).

    ``largest``: a result whose ingest curves to draw instead of the largest size's
    (a longer ingest-only run).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    largest = largest or max(results, key=lambda r: r["posts"])
    fig, (rate, memory, rebuild) = plt.subplots(1, 3, figsize=(13, 3.6), dpi=80)
    for name, label in INGESTS:
        curve = largest.get(name, {}).get("curve")
        if curve:
            rate.plot([c[0] for c in curve], [c[1] for c in curve], marker=".", label=label)
            if name == "trusted_reindex":
                memory.plot([c[0] for c in curve], [c[2] for c in curve], marker=".", label="anonymous RSS, trusted ingest")
    raw = largest.get("raw_verify_per_s")
    if raw:
        rate.axhline(raw, color="grey", linestyle="--", linewidth=1, label="raw Ed25519 verify, 1 core")
    rate.set(title=f"ingest rate while the store grows to {largest['posts']:,}", xlabel="posts stored", ylabel="posts/s")
    rate.set_ylim(bottom=0)
    rate.legend(fontsize=7)
    memory.set(title="memory through the ingest", xlabel="posts stored", ylabel="MB")
    memory.set_ylim(bottom=0)
    memory.legend(fontsize=7)
    sizes = [r["posts"] for r in results]
    rebuild.plot(sizes, [r["rebuild"]["local_s"] for r in results], marker="o", label="rebuild verify (local engine)")
    if all("bulk_reindex" in r for r in results):
        rebuild.plot(sizes, [r["bulk_reindex"]["seconds"] for r in results], marker="o", label="bulk reindex")
    if all("spark_local[2]_s" in r["rebuild"] for r in results):
        rebuild.plot(sizes, [r["rebuild"]["spark_local[2]_s"] for r in results], marker="o", label="rebuild verify (Spark local[2])")
    rebuild.set(title="rebuild time", xlabel="posts", ylabel="seconds", xscale="log", yscale="log")
    rebuild.legend(fontsize=7)
    for ax in (rate, memory, rebuild):
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
