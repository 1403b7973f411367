"""A message page as the server rendered it, read back from its HTML: the events table and the timeline picture."""

from __future__ import annotations

from dataclasses import dataclass

from django.test.html import Element, parse_html


@dataclass
class RenderedLane:
    name: str
    end: str
    attempts: list[tuple[str, str]]  # (data-attempt, data-outcome) of each bar, left to right as drawn
    marks: list[str]  # data-event of each mark


@dataclass
class RenderedMessage:
    final_state: str
    produced_by: str
    rows: list[list[str]]  # the events table's cells: #, time, step, group, attempt, consumer/client, broker, detail
    lanes: list[RenderedLane]

    @property
    def steps(self) -> list[tuple[str, str | None, int | None]]:
        return [(r[2], r[3] or None, int(r[4]) if r[4] else None) for r in self.rows]


def _walk(node):
    if isinstance(node, Element):
        yield node
        for child in node.children:
            yield from _walk(child)


def _attr(element: Element, name: str) -> str | None:
    return dict(element.attributes).get(name)


def _text(element: Element) -> str:
    return "".join(c if isinstance(c, str) else _text(c) for c in element.children).strip()


def _find(root, name: str, **attrs) -> list[Element]:
    return [e for e in _walk(root) if e.name == name
            and all(_attr(e, k.replace("_", "-")) == v for k, v in attrs.items())]


def rendered_message(html: str) -> RenderedMessage:
    root = parse_html(html)
    [table] = _find(root, "table", data_testid="events")
    rows = [[_text(td) for td in tr.children if isinstance(td, Element) and td.name == "td"]
            for tr in _find(table, "tr") if _attr(tr, "data-event")]
    [svg] = _find(root, "svg", data_testid="timeline")
    lanes = [RenderedLane(_attr(g, "data-lane"), _attr(g, "data-end"),
                          [(_attr(r, "data-attempt"), _attr(r, "data-outcome")) for r in _find(g, "rect")],
                          [_attr(c, "data-event") for c in _find(g, "circle")])
             for g in _find(svg, "g") if _attr(g, "data-lane")]
    [state] = _find(root, "span", data_testid="final-state")
    props = [e for e in _find(root, "dl") if _attr(e, "class") == "props"][0]
    terms = [c for c in props.children if isinstance(c, Element)]
    produced_by = next(_text(terms[i + 1]) for i, t in enumerate(terms) if t.name == "dt" and _text(t) == "Produced by")
    return RenderedMessage(_text(state), produced_by, rows, lanes)
