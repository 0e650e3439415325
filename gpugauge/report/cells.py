"""A report table's cells: plain text, links, or text marked with a CSS class of its own.

Markdown and HTML render the same cells; a flag (noisy, no interval) is carried by the cell
it is about, so that the page styles that number and not whatever column stands second.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

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


def cell_text(cell: Cell) -> str:
    """The cell as Markdown text: links as ``[text](target)``."""
    if isinstance(cell, Marked):
        return cell.text
    return cell if isinstance(cell, str) else ", ".join(f"[{t}]({href})" for t, href in cell)


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
    return "<td>" + ", ".join(f'<a href="{e(href)}">{e(t)}</a>' for t, href in cell) + "</td>"
