"""PDFs written by hand for tests: pages of Helvetica text, each page's content stream
plain or Flate-compressed, with a correct cross-reference table."""

from __future__ import annotations

import zlib


def pdf_of(*pages: str, padding: int = 0) -> bytes:
    """A PDF with one page per text. ``padding``: that many spaces after each page's text,
    its content compressed (a small file that decompresses to ``padding`` bytes a page)."""
    count = len(pages)
    fonts = 3 + 2 * count  # the object number of the one font
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
                   b" ".join(b"%d 0 R" % (3 + 2 * i) for i in range(count)), count)]
    for i, text in enumerate(pages):
        content = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode() + b" " * padding
        kind = b""
        if padding:
            content, kind = zlib.compress(content, 9), b" /Filter /FlateDecode"
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
                       b"/Contents %d 0 R /Resources << /Font << /F1 %d 0 R >> >> >>"
                       % (4 + 2 * i, fonts))
        objects.append(b"<< /Length %d%s >>\nstream\n%s\nendstream" % (
            len(content), kind, content))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1, xref)
    return bytes(out)
