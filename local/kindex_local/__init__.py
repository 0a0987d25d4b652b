"""Local mode's runtime: the HTTP server, the ingest worker and scheduler, and the `kindex` command. Not part of the
Lambda layer."""
