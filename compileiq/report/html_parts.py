"""The HTML of a report: one self-contained page (inline style and script; its Content-Security-Policy
forbids any network request), its sections, tables (sortable, numbers right-aligned) and notes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from compileiq.core.text import html_text

_STYLE = """body{font-family:sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}
th{background:#f3f3f3}table.sortable th{cursor:pointer}td.n{text-align:right}.failed{color:#c00}
.note{color:#555;font-size:13px}pre{white-space:pre-wrap;font-size:12px;background:#f7f7f7;padding:4px}
section{margin-bottom:2em}"""
_SORT = ("document.querySelectorAll('table.sortable th').forEach(function(th,i){th.addEventListener('click',"
         "function(){var b=th.closest('table').tBodies[0],r=Array.from(b.rows),d=th.dataset.dir==='a'?-1:1;"
         "th.dataset.dir=d>0?'a':'d';function k(row){var c=row.cells[i],v=c.dataset.v!==undefined?c.dataset.v:"
         "c.textContent,n=parseFloat(v);return isNaN(n)?[1,v]:[0,n]}r.sort(function(x,y){var a=k(x),c=k(y);"
         "if(a[0]!==c[0])return a[0]-c[0];return(a[1]<c[1]?-1:a[1]>c[1]?1:0)*d});"
         "r.forEach(function(x){b.appendChild(x)})})});")
_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def html_document(title: str, body: str) -> str:
    """A complete page: inline style and script only; the CSP forbids any network request."""
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
            f"<title>{html_text(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{html_text(title)}</h1>{body}<script>{_SORT}</script></body></html>\n")


def html_section(name: str, title: str, content: str) -> str:
    return f'<section id="{name}"><h2>{html_text(title)}</h2>{content}</section>'


def html_table(header: Sequence[str], rows: Sequence[Sequence[Any]], css: str = "") -> str:
    head = "".join(f"<th>{html_text(h)}</th>" for h in header)
    head = f"<thead><tr>{head}</tr></thead>" if any(header) else ""
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    klass = f' class="{css}"' if css else ""
    return f"<table{klass}>{head}<tbody>{body}</tbody></table>"


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None or not isinstance(value, int | float):
        return f"<td>{html_text(text(value))}</td>"
    return f'<td class="n" data-v="{value!r}">{html_text(text(value))}</td>'


def text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def html_note(text: str) -> str:
    return f'<p class="note">{html_text(text)}</p>'
