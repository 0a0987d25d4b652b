"""Scanned PDFs made at test time from the shared documents (never committed): chosen pages of a real PDF are
rendered to a picture (PDFium) and wrapped in a PDF page of their own (Pillow), so that they have no text layer
and OCR is the only way to read them; the other pages are copied with their text. Plus a hostile scan: one huge
image on a huge page, built in bounded memory."""

from __future__ import annotations

import io
import zlib
from pathlib import Path

SHARED_PDFS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "docs" / "pdf"
WORD_PROCESSOR = SHARED_PDFS / "docling-multi_page.pdf"  # 5 pages of prose (MIT, docling's test fixture)


def page_words(pdf: bytes, index: int, *, min_length: int = 6) -> set[str]:
    """The words of `min_length` letters or more in page `index`'s text layer, lower-cased."""
    from pypdf import PdfReader

    text = PdfReader(io.BytesIO(pdf)).pages[index].extract_text() or ""
    words = ("".join(ch for ch in word if ch.isalpha()).lower() for word in text.split())
    return {word for word in words if len(word) >= min_length}


def scanned_page(pdf: bytes, index: int, *, dpi: int = 150) -> bytes:
    """Page `index` of `pdf` as a one-page PDF holding only its picture (greyscale, `dpi`)."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(pdf)
    try:
        image = document[index].render(scale=dpi / 72, grayscale=True).to_pil()
    finally:
        document.close()
    out = io.BytesIO()
    image.save(out, "PDF", resolution=dpi)
    return out.getvalue()


def with_scanned_pages(pdf: bytes, scanned: set[int], *, dpi: int = 150) -> bytes:
    """`pdf` with the pages in `scanned` (0-based) replaced by their pictures; every other page as it was."""
    from pypdf import PdfReader, PdfWriter

    original = PdfReader(io.BytesIO(pdf))
    writer = PdfWriter()
    for index, page in enumerate(original.pages):
        if index in scanned:
            writer.add_page(PdfReader(io.BytesIO(scanned_page(pdf, index, dpi=dpi))).pages[0])
        else:
            writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def first_pages(pdf: bytes, count: int) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter()
    for page in PdfReader(io.BytesIO(pdf)).pages[:count]:
        writer.add_page(page)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def huge_scan(*, page_side: int, image_side: int) -> bytes:
    """One page of `page_side` x `page_side` points drawing one white greyscale image of `image_side` x
    `image_side` pixels (400 MB of pixels at 20,000), deflated in slices so that building it never holds them."""
    from pypdf import PdfWriter
    from pypdf.generic import DictionaryObject, NameObject, NumberObject, StreamObject

    deflate = zlib.compressobj(9)
    side = image_side
    rows = b"\xff" * side * 100
    parts = [deflate.compress(rows) for _ in range(side // 100)]
    parts.append(deflate.flush())
    writer = PdfWriter()
    page = writer.add_blank_page(page_side, page_side)
    image = StreamObject()
    image._data = b"".join(parts)
    image.update(
        {
            NameObject("/Type"): NameObject("/XObject"),
            NameObject("/Subtype"): NameObject("/Image"),
            NameObject("/Width"): NumberObject(side),
            NameObject("/Height"): NumberObject(side),
            NameObject("/ColorSpace"): NameObject("/DeviceGray"),
            NameObject("/BitsPerComponent"): NumberObject(8),
            NameObject("/Filter"): NameObject("/FlateDecode"),
        }
    )
    resources = DictionaryObject(
        {NameObject("/XObject"): DictionaryObject({NameObject("/Im0"): writer._add_object(image)})}
    )
    page[NameObject("/Resources")] = resources
    content = StreamObject()
    content._data = f"q {page_side} 0 0 {page_side} 0 0 cm /Im0 Do Q".encode()
    page[NameObject("/Contents")] = writer._add_object(content)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
