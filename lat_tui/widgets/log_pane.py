"""The selected job's log: follows the end, stays put once the user scrolls up, and searches.

Following is a state of its own rather than "is the view at the end now": a resize or a burst of
lines moves the end away from the view without the user asking, and the pane must keep up then.
"""

from __future__ import annotations

import re

from rich.highlighter import Highlighter
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.events import Resize
from textual.strip import Strip
from textual.widgets import Input, Log

MATCH_STYLE = "black on yellow"
CUT_MARK = "…"  # where a line goes on past the pane's edge (left/right scroll to it)


class MatchHighlighter(Highlighter):
    """Marks every case-insensitive occurrence of the search text."""

    def __init__(self) -> None:
        self.pattern: re.Pattern[str] | None = None

    def highlight(self, text: Text) -> None:
        if self.pattern is not None:
            text.highlight_regex(self.pattern, MATCH_STYLE)


class FollowingLog(Log):
    """A Log that knows whether it follows the end; ``n``/``N`` walk the search matches.

    It draws no horizontal scrollbar (a one-row bar of a long line's width was a few stray
    block glyphs at the bottom of the pane, app.tcss): a line that goes on past an edge ends
    there in ``…`` instead, and left/right scroll to the rest.
    """

    HELP_TITLE = "in the log pane"
    BINDINGS = [
        Binding("end", "follow", "Follow", show=False),
        Binding("n", "next_match", "Next match", show=False),
        Binding("N", "previous_match", "Previous match", key_display="N", show=False),
    ]

    def __init__(self, **kwargs):
        super().__init__(highlight=True, **kwargs)
        self.highlighter = MatchHighlighter()
        self.following = True
        self._match_line: int | None = None

    # ------------------------------------------------------------------ following
    def append(self, lines: list[str]) -> None:
        self.write_lines(lines, scroll_end=self.following)

    def watch_scroll_y(self, old: float, new: float) -> None:
        super().watch_scroll_y(old, new)
        if new >= self.max_scroll_y:
            self.following = True
        elif new < old:
            self.following = False  # away from the end and upwards: the user scrolled

    def on_resize(self, event: Resize) -> None:
        if self.following:
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True, x_axis=False)

    def action_follow(self) -> None:
        self.following = True
        self.scroll_end(animate=False, immediate=True, x_axis=False)

    def reset(self) -> None:
        """Another job's log: the search, its highlight and its subtitle belong to the last one."""
        self.clear()
        self.following = True
        self._match_line = None
        self.highlighter.pattern = None
        self.border_subtitle = ""

    # ------------------------------------------------------------------ cut lines
    def _render_line(self, y: int, scroll_x: int, width: int) -> Strip:
        """``width`` takes in the vertical scrollbar's cells: the marks go at the edge of what shows."""
        strip = super()._render_line(y, scroll_x, width)
        shown = min(width, self.scrollable_content_region.width)
        if y >= len(self._lines) or shown < 2:
            return strip
        cut_left = scroll_x > 0 and bool(self._lines[y][:scroll_x].strip())
        cut_right = self._render_line_strip(y, self.rich_style).cell_length > scroll_x + shown
        marked = _mark_cuts(strip.crop(0, shown), shown, cut_left, cut_right, self.rich_style + Style(dim=True))
        return Strip.join([marked, strip.crop(shown, width)])

    # ------------------------------------------------------------------ search
    def search(self, text: str) -> int | None:
        """Highlight ``text`` and go to its last match (the newest line); the line, or None."""
        self.highlighter.pattern = re.compile(re.escape(text), re.IGNORECASE) if text else None
        self._render_line_cache.clear()
        self.refresh()
        self._match_line = None
        return self._go(-1, start=len(self.lines)) if text else None

    def matches(self) -> list[int]:
        pattern = self.highlighter.pattern
        return [] if pattern is None else [y for y, line in enumerate(self.lines) if pattern.search(line)]

    def action_next_match(self) -> None:
        self._go(1)

    def action_previous_match(self) -> None:
        self._go(-1)

    def _go(self, step: int, start: int | None = None) -> int | None:
        found = self.matches()
        if not found:
            if self.highlighter.pattern is not None:
                self.notify(f"no match for {self.highlighter.pattern.pattern!r}", severity="warning")
            return None
        here = start if start is not None else (self._match_line if self._match_line is not None else -1)
        later = [y for y in found if y > here] if step > 0 else [y for y in found if y < here][::-1]
        self._match_line = (later or (found if step > 0 else found[::-1]))[0]  # wrap around
        self.following = False
        self.scroll_to(y=max(self._match_line - self.scrollable_content_region.height // 2, 0), animate=False,
                       immediate=True)
        self.border_subtitle = f"match line {self._match_line + 1} · n/N: next/previous · end: follow · esc: jobs"
        return self._match_line


def _mark_cuts(strip: Strip, width: int, left: bool, right: bool, style: Style) -> Strip:
    """``strip`` with its first and/or last cell replaced by the cut mark."""
    if not (left or right):
        return strip
    parts = [Strip([Segment(CUT_MARK, style)], 1)] if left else []
    parts.append(strip.crop(1 if left else 0, width - 1 if right else width))
    if right:
        parts.append(Strip([Segment(CUT_MARK, style)], 1))
    return Strip.join(parts)


class LogPane(Vertical):
    """The log and its search input (shown by ``open_search``, hidden again on enter, or on escape by
    the screen, which gives the keys back to the job table).

    The search field takes the focus at once, never through ``Widget.focus`` (which moves it on a
    later turn): keys typed right after ``/`` are handed to the widget focused when the app handles
    them, and the search text went to the job table (``n`` opened the plan form, ``r`` requeued).
    The dashboard's ``/`` is a priority key for the same reason (lat_tui.screens.fields).
    """

    def __init__(self, max_lines: int, **kwargs):
        super().__init__(**kwargs)
        self.max_lines = max_lines

    def compose(self) -> ComposeResult:
        yield FollowingLog(id="job-log", max_lines=self.max_lines)
        search = Input(id="log-search", placeholder="search the log (enter: find, escape: close)", compact=True)
        search.display = False
        yield search

    @property
    def log(self) -> FollowingLog:
        return self.query_one(FollowingLog)

    @property
    def search_field(self) -> Input:
        return self.query_one("#log-search", Input)

    def open_search(self) -> None:
        self.search_field.display = True
        self.screen.set_focus(self.search_field)

    @on(Input.Submitted, "#log-search")
    def _search(self, event: Input.Submitted) -> None:
        """The log takes the keys, so n/N walk the matches (escape, the screen's key, gives them back)."""
        event.stop()
        self.close_search()
        self.screen.set_focus(self.log)
        self.log.search(event.value.strip())

    def close_search(self) -> None:
        self.query_one("#log-search", Input).display = False
