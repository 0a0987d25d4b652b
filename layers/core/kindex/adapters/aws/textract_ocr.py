"""OCR of scanned PDF pages on AWS: Amazon Textract's DetectDocumentText, one synchronous call per scanned page.

Each scanned page is copied into a PDF of its own (pypdf, already in the layer: no renderer on Lambda), which the
synchronous API reads directly (single-page PDFs up to 10 MB). Only the scanned pages are sent, so a document
pays for its scans and not for the pages that have text (docs/decisions.md, "Scanned pages on AWS"). Pages are sent
a few at a time (`concurrency`), within Textract's default DetectDocumentText rate. Throttling or an outage, after
botocore's retries, is a DependencyFailed: the document is retried later, whole. A page Textract refuses (too large,
unsupported) is left unread with Textract's error code as the reason.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any

from kindex.adapters.aws import boto
from kindex.domain.errors import DependencyFailed
from kindex.domain.types import OcrOutcome

logger = logging.getLogger(__name__)

#: DetectDocumentText's limit for a document passed as bytes.
MAX_REQUEST_BYTES = 10 * 1024 * 1024
#: Parallel calls per document: under the default quota of DetectDocumentText (10 TPS in the largest regions, less
#: in some), with room for a second ingest invocation at the same time.
DEFAULT_CONCURRENCY = 4
# Errors that say the page itself cannot be read (it is left empty, the document still indexes); any other error is
# Textract or the network failing, worth a retry of the document.
PAGE_ERRORS = frozenset(
    {
        "InvalidParameterException",
        "UnsupportedDocumentException",
        "BadDocumentException",
        "DocumentTooLargeException",
    }
)


@lru_cache(maxsize=3)
def textract_client(profile: str = boto.BACKGROUND) -> Any:
    import boto3

    return boto3.client("textract", config=boto.client_config(profile))


def build_page_pdf(pdf: bytes, index: int) -> bytes:
    """Page `index` (0-based) of `pdf` as a PDF of its own (resources it draws come along)."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    writer.add_page(PdfReader(io.BytesIO(pdf)).pages[index])
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def build_detect_request(page_pdf: bytes) -> dict:
    return {"Document": {"Bytes": page_pdf}}


def page_text(response: dict) -> str:
    """The LINE blocks of a DetectDocumentText response in the order Textract returns them (reading order), one a
    line. WORD blocks repeat the lines' words and are skipped."""
    return "\n".join(block.get("Text", "") for block in response.get("Blocks", []) if block.get("BlockType") == "LINE")


class TextractPageReader:
    """Implements PageReader with Amazon Textract."""

    name = "Amazon Textract"

    def __init__(self, *, client: Any = None, concurrency: int = DEFAULT_CONCURRENCY):
        self._client = client
        self.concurrency = concurrency

    @property
    def client(self) -> Any:
        return self._client or boto.shared_client(textract_client, "Amazon Textract")

    def read_pages(self, pdf: bytes, pages: Sequence[int]) -> OcrOutcome:
        client = self.client  # one client for the document's calls (boto3 clients are thread-safe)
        with ThreadPoolExecutor(max_workers=max(1, min(self.concurrency, len(pages)))) as pool:
            results = list(pool.map(lambda index: self._read_page(client, pdf, index), pages))
        texts = {index: text for index, text, _ in results if text is not None}
        unread = {index: reason for index, text, reason in results if text is None}
        return OcrOutcome(texts=texts, unread=unread)

    def _read_page(self, client: Any, pdf: bytes, index: int) -> tuple[int, str | None, str]:
        from botocore.exceptions import BotoCoreError, ClientError

        page_pdf = build_page_pdf(pdf, index)
        if len(page_pdf) > MAX_REQUEST_BYTES:
            return index, None, f"the page is {len(page_pdf):,} bytes as a PDF; Textract reads at most 10 MB"
        try:
            response = client.detect_document_text(**build_detect_request(page_pdf))
        except ClientError as error:
            code = error.response.get("Error", {}).get("Code", "")
            if code in PAGE_ERRORS:
                return index, None, f"Textract refused the page ({code})"
            raise DependencyFailed(f"Amazon Textract failed ({code or 'no error code'})") from error
        except BotoCoreError as error:
            raise DependencyFailed(f"Amazon Textract is unreachable ({type(error).__name__})") from error
        return index, page_text(response), ""
