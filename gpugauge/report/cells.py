"""A report table's cells: plain text, links, or text marked with a CSS class of its own.

Markdown and HTML render the same cells; a flag (noisy, no interval) is carried by the cell
it is about, so that the page styles that number and not whatever column stands second.

Every string of a cell came from somewhere (a run file's case ids, notes and artifact
paths), so this is the one place where text is made safe: :func:`md_text` keeps Markdown
from reading a line break, a ``|``, a tag or a link in it as structure, and
:func:`href` turns a file path into a link target that is always a path (percent-encoded:
``javascript:alert(1)`` becomes the relative file ``javascript%3Aalert%281%29``, never a
script). HTML is escaped with :func:`html.escape`.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import quote

Links = tuple[tuple[str, str], ...]  # (text, link target) pairs, shown in one cell


@dataclass(frozen=True)
class Marked:
    """A cell's text with a CSS class of its own: the number a flag is about, not a column."""

    text: str
    css: str  # e.g. 'noisy' (italic), 'no-interval'; '' for none


Cell = str | Links | Marked


def flag_of(noisy: bool, unsampled: bool) -> str:
    """The CSS class of a cell whose number is noisy or has no interval; '' for neither."""
    return " ".join(c for c, on in (("noisy", noisy), ("no-interval", unsampled)) if on)


_TAG_OR_LINK = re.compile(r"<(?=[A-Za-z/!?])")  # raw HTML, a comment or an autolink
_LINK_END = re.compile(r"\]\(")  # '](' closes a link's or an image's text


def _visible(c: str) -> str:
    r"""A control character or line break as its escape ('\n'), shown, not acted on."""
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
    if c in named:
        return named[c]
    return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"


def md_text(text: str) -> str:
    r"""``text`` for one line of Markdown (a table cell, a list item), shown as it is.

    Backslashes and ``|`` are escaped (a ``|`` would split the cell), ``<`` before a tag,
    comment or autolink is written ``&lt;``, a ``](`` that would make a link or an image
    has its ``(`` escaped, and line breaks and other control characters are written as
    escapes (``\n``): a case id with a newline cannot start a heading or a row. Other
    text (numbers, ``[0.98, 1.02]``, ids) is unchanged.
    """
    out = text.replace("\\", "\\\\").replace("|", "\\|")
    out = _LINK_END.sub("]\\\\(", _TAG_OR_LINK.sub("&lt;", out))
    return "".join(_visible(c) if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in out)


def code_span(text: str) -> str:
    """``text`` as inline code: fenced by more backticks than it holds, breaks escaped."""
    flat = "".join(
        _visible(c) if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c for c in text
    )
    fence = "`" * (max((len(r) for r in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def href(path: str) -> str:
    """A file path as a link target: percent-encoded, so it is always a path.

    No scheme survives (``:`` becomes ``%3A``): an artifact named ``javascript:…`` is a
    link to a file of that name, never a script; spaces and parentheses cannot end a
    Markdown link early.
    """
    return quote(path, safe="/")


def cell_text(cell: Cell) -> str:
    """The cell as Markdown text (:func:`md_text`): links as ``[text](target)``."""
    if isinstance(cell, Marked):
        return md_text(cell.text)
    if isinstance(cell, str):
        return md_text(cell)
    return ", ".join(
        f"[{md_text(t).replace('[', chr(92) + '[').replace(']', chr(92) + ']')}]({href(p)})"
        for t, p in cell
    )


def markdown_table(headers: list[str], rows: list[list[Cell]]) -> str:
    """A Markdown table padded so that it also reads as aligned plain text."""
    texts = [[cell_text(c) for c in r] for r in rows]
    widths = [max(len(c) for c in col) for col in zip(headers, *texts, strict=True)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join(
        [
            line(headers),
            "|" + "|".join("-" * (w + 2) for w in widths) + "|",
            *(line(r) for r in texts),
        ]
    )


def html_cell(cell: Cell) -> str:
    """The cell as an HTML ``<td>``, its own class where it is marked."""
    e = html.escape
    if isinstance(cell, Marked):
        css = f' class="{e(cell.css)}"' if cell.css else ""
        return f"<td{css}>{e(cell.text)}</td>"
    if isinstance(cell, str):
        return f"<td>{e(cell)}</td>"
    return "<td>" + ", ".join(f'<a href="{e(href(p))}">{e(t)}</a>' for t, p in cell) + "</td>"
