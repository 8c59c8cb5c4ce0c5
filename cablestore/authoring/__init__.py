"""Writing posts: as the local user, linked to a channel's heads with a clock
that only moves forward (:mod:`cablestore.authoring.author`), key files
(:mod:`cablestore.authoring.keyfile`), and deterministic workloads of signed
posts for tests and benchmarks (:mod:`cablestore.authoring.workload`).
"""
