"""Updates that leave an unchanged widget alone: every ``Static.update`` repaints, and the 1 Hz poll
hands most widgets the same content again (an idle dashboard would redraw itself every second)."""

from __future__ import annotations

from textual.widgets import Sparkline, Static


def set_content(widget: Static, content) -> None:
    if getattr(widget, "_quiet_last", None) != content:
        widget._quiet_last = content
        widget.update(content)


def set_data(sparkline: Sparkline, data: list[float]) -> None:
    if list(sparkline.data or ()) != data:
        sparkline.data = data
