"""The API's own request and response models, re-exported for client code (`from kindex.client.models import ...`)."""

from kindex.api.models import (
    ChunkList,
    ChunkOut,
    CollectionList,
    DocumentList,
    DocumentOut,
    RightsSecret,
    UploadRequest,
    UploadResponse,
)
from kindex.domain.models import (
    Collection,
    CollectionInput,
    DocumentInput,
    DocumentStatus,
    DocumentSummary,
    ReindexJob,
)
from kindex.domain.query import (
    Citation,
    CitationDocument,
    CitationReference,
    CitationsRequest,
    CitationsResponse,
    MultiQueryRequest,
    QueryFilters,
    QueryRequest,
    QueryResponse,
    QueryResult,
    QueryWarning,
)

__all__ = ["ChunkList", "ChunkOut", "Citation", "CitationDocument", "CitationReference", "CitationsRequest",
           "CitationsResponse", "Collection", "CollectionInput", "CollectionList", "DocumentInput", "DocumentList",
           "DocumentOut", "DocumentStatus", "DocumentSummary", "MultiQueryRequest", "QueryFilters", "QueryRequest",
           "QueryResponse", "QueryResult", "QueryWarning", "ReindexJob", "RightsSecret", "UploadRequest",
           "UploadResponse"]
