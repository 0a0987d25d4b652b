"""OCR of scanned PDF pages on this machine: PDFium (pypdfium2) renders each page, Tesseract (tesserocr) reads it.

tesserocr's wheel brings its own libtesseract (5.5, built without OpenMP) and reads the language data of Debian's
`tesseract-ocr-eng`/`-spa` packages (`make test` provisions them; `tessdata_dir` finds them). In-process and
single-threaded on purpose: the Tesseract command line with OpenMP took 25.7 s for a page that one thread reads in
6.8 s on this project's loaded 2-core machines (docs/decisions.md), and the ingest worker's own threads give the
parallelism. Each page has a time limit (Tesseract's own deadline), after which it is left unread.

Memory is bounded twice, whatever the file claims. The render: a page is rendered at `dpi` unless that would
exceed `max_pixels`, in which case the scale shrinks until it fits (a 20,000-point square page renders to about
3,500 pixels a side, not 83,000). The images: PDFium may decode a page's image whole before it scales it (a
20,000 x 20,000-pixel image on a page of that size grew the process by 580 MB, measured with pypdfium2 5.15), so a
page whose images hold more than `max_image_pixels` (their sizes are read from the file, nothing is decoded) is left
unread, with that reason. PDFium is not thread-safe: one lock serializes its use in this process.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Sequence
from pathlib import Path

from kindex.domain.types import OcrOutcome

logger = logging.getLogger(__name__)

#: Tesseract reads best at about 300 DPI; scans are seldom sharper.
DEFAULT_DPI = 300
#: A Letter or A4 page at 300 DPI is 8.4-8.7 million pixels; 12 million leaves room for Legal and a margin. An 8-bit
#: greyscale render of this size is 12 MB, and Tesseract's working set on it stays near 100 MB.
DEFAULT_MAX_PIXELS = 12_000_000
#: A Letter page scanned at 600 DPI is 34 million pixels, an A4 one 35 million: 50 million admits every real scan
#: and bounds one page's decoded images to 50 MB in grey, 150 MB in colour.
DEFAULT_MAX_IMAGE_PIXELS = 50_000_000
DEFAULT_TIMEOUT_S = 120
#: The languages read when their data is installed (Debian: tesseract-ocr-eng, tesseract-ocr-spa).
PREFERRED_LANGUAGES = ("eng", "spa")
#: Where Debian (Tesseract 5, then 4) and most source builds put the language data; TESSDATA_PREFIX wins.
TESSDATA_DIRS = ("/usr/share/tesseract-ocr/5/tessdata", "/usr/share/tesseract-ocr/4.00/tessdata", "/usr/share/tessdata")

_PDFIUM = threading.Lock()


class PageTooLarge(Exception):
    """A page whose images exceed the pixel bound: it is left unread, with this message as the reason."""


def tessdata_dir() -> Path | None:
    """The folder holding Tesseract's English data, or None when it is not installed."""
    configured = os.environ.get("TESSDATA_PREFIX")
    for candidate in ([configured] if configured else []) + list(TESSDATA_DIRS):
        if (Path(candidate) / "eng.traineddata").is_file():
            return Path(candidate)
    return None


def tesseract_installed() -> bool:
    return tessdata_dir() is not None


def render_scale(width_pt: float, height_pt: float, dpi: int, max_pixels: int) -> float:
    """The render scale (pixels per PDF point) for `dpi`, shrunk so that the page's pixels stay within
    `max_pixels`."""
    scale = dpi / 72
    area = max(width_pt, 1.0) * max(height_pt, 1.0)
    if area * scale * scale > max_pixels:
        scale = math.sqrt(max_pixels / area)
    return scale


class TesseractPageReader:
    """Implements PageReader with PDFium and Tesseract."""

    name = "Tesseract"

    def __init__(
        self,
        *,
        tessdata: Path | None = None,
        dpi: int = DEFAULT_DPI,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        self.tessdata = tessdata or tessdata_dir()
        self.dpi = dpi
        self.max_pixels = max_pixels
        self.max_image_pixels = max_image_pixels
        self.timeout_s = timeout_s

    def languages(self) -> str:
        """'eng+spa' when both are installed: Tesseract then reads either (the shared documents have Spanish)."""
        folder = self.tessdata or Path(".")
        return "+".join(lang for lang in PREFERRED_LANGUAGES if (folder / f"{lang}.traineddata").is_file()) or "eng"

    def read_pages(self, pdf: bytes, pages: Sequence[int]) -> OcrOutcome:
        import tesserocr  # type: ignore[import-untyped]  # no type information published

        texts: dict[int, str] = {}
        unread: dict[int, str] = {}
        if self.tessdata is None:
            return OcrOutcome(texts={}, unread={index: "Tesseract's language data is not installed" for index in pages})
        # One engine per call (loading the language data costs about half a second), never shared between threads.
        with tesserocr.PyTessBaseAPI(path=f"{self.tessdata}/", lang=self.languages()) as api:
            for index in pages:
                try:
                    image = self._render(pdf, index)
                except PageTooLarge as error:
                    unread[index] = str(error)
                    continue
                except Exception as error:  # PdfiumError, or ValueError on a page PDFium cannot draw
                    unread[index] = f"could not render the page ({type(error).__name__})"
                    continue
                api.SetImage(image)
                if not api.Recognize(timeout=int(self.timeout_s * 1000)):
                    logger.warning("page not read", extra={"page": index + 1, "timeout_s": self.timeout_s})
                    unread[index] = f"Tesseract did not finish the page within {self.timeout_s:g} s"
                    continue
                texts[index] = api.GetUTF8Text()
        return OcrOutcome(texts=texts, unread=unread)

    def _render(self, pdf: bytes, index: int):
        import pypdfium2 as pdfium  # type: ignore[import-untyped]

        with _PDFIUM:
            document = pdfium.PdfDocument(pdf)
            try:
                page = document[index]
                image_pixels = sum(
                    width * height
                    for width, height in (
                        image.get_px_size() for image in page.get_objects(filter=(pdfium.raw.FPDF_PAGEOBJ_IMAGE,))
                    )
                )
                if image_pixels > self.max_image_pixels:
                    raise PageTooLarge(
                        f"the page's images have {image_pixels:,} pixels; the limit is {self.max_image_pixels:,}"
                    )
                width, height = page.get_size()
                scale = render_scale(width, height, self.dpi, self.max_pixels)
                # Greyscale: a third of the memory of RGB, and what Tesseract binarizes from anyway.
                return page.render(scale=scale, grayscale=True).to_pil()
            finally:
                document.close()
