"""What routes depend on: the services, handed over by the function that serves them (`resolver.dependency_overrides`),
so the api never looks its services up and never imports a composition root or an adapter."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Protocol

from aws_lambda_powertools.event_handler import Depends

if TYPE_CHECKING:
    from kindex.app.catalog import CatalogService
    from kindex.app.citations import CitationService
    from kindex.app.query import QueryService
    from kindex.app.reindex.jobs import ReindexJobs
    from kindex.app.rights import RightsSecretService
    from kindex.app.transfer import TransferService
    from kindex.app.usage import UsageService


class ApiServices(Protocol):
    """The use cases the routes call."""

    catalog: CatalogService
    query: QueryService
    citations: CitationService
    reindex_jobs: ReindexJobs
    rights_secrets: RightsSecretService
    transfer: TransferService
    usage: UsageService


def services() -> ApiServices:
    """Replaced by each function with its composed services (`resolver.dependency_overrides[services] = ...`)."""
    raise RuntimeError("the function serving this route did not hand over its services")


ServicesDep = Annotated[ApiServices, Depends(services)]
