"""A SelectionList whose boxes say picked or not with a glyph (``✓``), not with colour alone:
on a monochrome terminal, or to a colour-blind user, Textual's box looks the same either way."""

from __future__ import annotations

from rich.segment import Segment
from textual.strip import Strip
from textual.widgets import SelectionList
from textual.widgets._toggle_button import ToggleButton

CHECKED, UNCHECKED = "✓", " "


class CheckedSelectionList(SelectionList):
    def render_line(self, y: int) -> Strip:
        strip = super().render_line(y)
        segments = list(strip)
        index = int(self.scroll_offset.y) + y
        if len(segments) < 3 or segments[1].text != ToggleButton.BUTTON_INNER or index >= self.option_count:
            return strip  # not an option's first line (a wrapped prompt's next line, or past the end)
        picked = self.get_option_at_index(index).value in self._selected
        inner = segments[1]
        segments[1] = Segment(CHECKED if picked else UNCHECKED, inner.style, inner.control)
        return Strip(segments, strip.cell_length)
