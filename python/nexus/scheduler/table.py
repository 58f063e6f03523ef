"""Plain-text tables for the plan printouts (``nexus plan``, the plan rank 0 prints at start)."""

from __future__ import annotations

from collections.abc import Sequence


def format_table(headers: Sequence[str], rows: Sequence[Sequence], title: str | None = None,
                 align: str | None = None) -> str:
    """A boxed-free aligned table: ``headers``, a rule, then ``rows`` (values shown with str()).

    ``align``: one character per column, "l" or "r" (default: numbers right, text left).
    """
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    ncol = len(headers)
    if any(len(r) != ncol for r in cells):
        raise ValueError(f"format_table: every row needs {ncol} cells")
    if align is None:
        align = "".join("r" if rows and all(isinstance(row[c], (int, float)) for row in rows)
                        else "l" for c in range(ncol))
    widths = [max(len(r[c]) for r in cells) for c in range(ncol)]

    def line(r):
        return "  ".join(v.rjust(w) if a == "r" else v.ljust(w)
                         for v, w, a in zip(r, widths, align)).rstrip()

    out = [] if title is None else [title]
    out += [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def _cell(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-2 or abs(v) >= 1e5 else f"{v:,.2f}".rstrip("0").rstrip(".")
    return str(v)
