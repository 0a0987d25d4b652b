"""How many chunks the configured OpenSearch domain holds before its k-NN memory is full (docs/scale.md's formulas).

k-NN graphs (faiss HNSW) are searched in native memory outside the JVM heap. OpenSearch Service sets the heap to
half the RAM, up to 32 GiB, and the k-NN circuit breaker (`knn.memory.circuit_breaker.limit`, default 50 %) lets
the graphs use half of what remains; past it, k-NN indexing and searches fail. Per vector and per copy (primary or
replica) a graph takes 1.1 x (bytes of the stored vector + 8 m) bytes (OpenSearch docs, *k-NN memory estimation*).
The synth prints the result, a stack output carries it, and an alarm fires well before the breaker.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kindex.adapters.aws.opensearch_design import IndexDesign

GIB = 1024**3
MAX_HEAP_GIB = 32
KNN_MEMORY_FRACTION = 0.5  # knn.memory.circuit_breaker.limit
# The default embedding model (openai:text-embedding-3-small) writes 1,536 dimensions.
DEFAULT_DIMENSIONS = 1536
# RAM (GiB) of OpenSearch Service instance sizes by family (Amazon OpenSearch Service pricing page, instance list).
RAM_GIB = {
    "t3": {"small": 2, "medium": 4},
    "m": {"large": 8, "xlarge": 16, "2xlarge": 32, "4xlarge": 64, "8xlarge": 128, "12xlarge": 192, "16xlarge": 256},
    "r": {"large": 16, "xlarge": 32, "2xlarge": 64, "4xlarge": 128, "8xlarge": 256, "12xlarge": 384, "16xlarge": 512},
    "c": {"large": 4, "xlarge": 8, "2xlarge": 16, "4xlarge": 32, "8xlarge": 64, "12xlarge": 96, "16xlarge": 128},
}
# Bytes of one stored vector in the graph's memory, by compression (d dimensions).
VECTOR_BYTES = {"none": lambda d: 4 * d, "fp16": lambda d: 2 * d, "16x": lambda d: 2 * d / 8, "32x": lambda d: d / 8}


def ram_gib(instance_type: str) -> int | None:
    """RAM of an OpenSearch instance type (`r6g.large.search`), None for a type this table does not know."""
    match = re.fullmatch(r"(t3|[mrc]\d+[a-z]*)\.([0-9]*x?large|small|medium)\.search", instance_type)
    if not match:
        return None
    family = "t3" if match.group(1) == "t3" else match.group(1)[0]
    return RAM_GIB[family].get(match.group(2))


def knn_memory_bytes(ram: float) -> float:
    """What the k-NN circuit breaker lets graphs use on one node of `ram` GiB."""
    heap = min(ram / 2, MAX_HEAP_GIB)
    return (ram - heap) * KNN_MEMORY_FRACTION * GIB


def bytes_per_vector(design: IndexDesign, dimensions: int) -> float:
    return 1.1 * (VECTOR_BYTES[design.compression](dimensions) + 8 * design.m)


@dataclass(frozen=True)
class SearchCapacity:
    instance_type: str
    instance_count: int
    dimensions: int
    design: IndexDesign
    chunks: int | None  # None: the instance type's memory is unknown here

    def describe(self) -> str:
        design = self.design
        setup = (
            f"{self.instance_count} x {self.instance_type}, {self.dimensions} dimensions, compression "
            f"{design.compression}, m {design.m}, {design.number_of_replicas} replica(s)"
        )
        if self.chunks is None:
            return f"OpenSearch k-NN capacity: unknown for {setup} (instance memory not in infra/capacity.py)"
        return f"OpenSearch k-NN capacity: about {self.chunks:,} chunks ({setup}) before the k-NN circuit breaker"


def search_capacity(
    instance_type: str, instance_count: int, design: IndexDesign, dimensions: int = DEFAULT_DIMENSIONS
) -> SearchCapacity:
    """Chunks (one vector each) the domain's k-NN memory holds, every copy counted."""
    ram = ram_gib(instance_type)
    chunks = None
    if ram is not None:
        total = knn_memory_bytes(ram) * instance_count
        chunks = math.floor(total / (bytes_per_vector(design, dimensions) * (1 + design.number_of_replicas)))
    return SearchCapacity(instance_type, instance_count, dimensions, design, chunks)
