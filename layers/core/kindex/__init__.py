"""kindex: a multi-tenant knowledge index for retrieval-augmented generation."""
