"""The layout of kindex's OpenSearch k-NN indices as a validated value (standard library only, so the stack's synth
can check a deployment's choices with the very rule the adapter applies). docs/scale.md says when to change what."""

from __future__ import annotations

import re
from dataclasses import dataclass

# k-NN engines the mapping may name; faiss is Amazon OpenSearch Service's default (and needs the plugin's native
# library), lucene is pure Java.
ENGINES = ("faiss", "lucene")
DEFAULT_ENGINE = "faiss"
# Vector compression: `none` (float32), `fp16` (faiss scalar quantization, 2 bytes a dimension), `16x` / `32x`
# (faiss `mode: on_disk` binary quantization, 2 or 1 bits a dimension, full vectors rescored from disk).
# Faiss only: the lucene engine would need its own int8 encoder, which this design does not offer.
COMPRESSIONS = ("none", "fp16", "16x", "32x")
# `refresh` of a write: `wait_for` returns when the write is searchable (one wait per upsert call, see upsert);
# `false` returns at once and the write becomes searchable at the next scheduled refresh (bulk backfills).
REFRESH_POLICIES = ("wait_for", "false")
_REFRESH_INTERVAL = re.compile(r"[1-9]\d*(ms|s|m)")


def check_engine(engine: str) -> str:
    if engine not in ENGINES:
        raise ValueError(f"unknown k-NN engine {engine!r}; use one of {', '.join(ENGINES)}")
    return engine


@dataclass(frozen=True)
class IndexDesign:
    """How a model's index is laid out; validated when built, so a bad deployment fails at the first write's
    wiring, not with a cluster error. Defaults suit one small node per environment (docs/scale.md)."""

    engine: str = DEFAULT_ENGINE
    number_of_shards: int = 1
    number_of_replicas: int = 1
    # 0: OpenSearch's default (number_of_shards x 2^n, at most 1,024), which already allows splits by powers of two;
    # with a routing partition, number_of_shards (no split: see __post_init__).
    number_of_routing_shards: int = 0
    routing_partition_size: int = 1
    # HNSW: on all ~44k SciFact sentences embedded by the default local model, SciFact's questions as queries, these
    # give recall@10 0.994 on lucene (m=32: 0.997; ef_search 200: 0.9995); docs/decisions.md 2026-12-02.
    m: int = 16
    ef_construction: int = 128
    ef_search: int = 100
    compression: str = "none"
    refresh_interval: str = "1s"

    def __post_init__(self) -> None:
        check_engine(self.engine)
        for name in ("number_of_shards", "routing_partition_size", "m", "ef_construction", "ef_search"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.number_of_replicas < 0 or self.number_of_routing_shards < 0:
            raise ValueError("number_of_replicas and number_of_routing_shards cannot be negative")
        shards, routing = self.number_of_shards, self.number_of_routing_shards
        if routing and (routing < shards or routing % shards or routing > 1024):
            raise ValueError("number_of_routing_shards must be a multiple of number_of_shards, at most 1024")
        if self.routing_partition_size != 1 and self.routing_partition_size >= shards:
            raise ValueError("routing_partition_size must be 1, or less than number_of_shards")
        if self.routing_partition_size > 1 and routing not in (0, shards):
            # A partition is `routing_partition_size` consecutive routing hashes, and with n routing shards per
            # shard consecutive hashes land on the same shard: measured on a 2.19 node, 6 shards with the default
            # 768 routing shards put all of a partition-3 tenant on one shard, with 6 on three.
            raise ValueError(
                "a routing partition spreads a tenant only when number_of_routing_shards equals "
                "number_of_shards (leave it 0): a partitioned index grows by reindexing, not split"
            )
        if not 2 <= self.m <= 100:
            raise ValueError("m must be between 2 and 100")
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"unknown compression {self.compression!r}; use one of {', '.join(COMPRESSIONS)}")
        if self.compression != "none" and self.engine != "faiss":
            raise ValueError(f"compression {self.compression} needs the faiss engine")
        if not _REFRESH_INTERVAL.fullmatch(self.refresh_interval):
            raise ValueError("refresh_interval must be a positive duration such as 1s, 500ms or 30s")
