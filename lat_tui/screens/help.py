"""The ``?`` help screen: every key of the screen it was opened on, read from the bindings
themselves (the screen's, its widgets' and the app's), so the list cannot drift from the code."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widget import Widget
from textual.widgets import Static


def key_label(binding: Binding) -> str:
    if binding.key_display:
        return binding.key_display
    names = {"question_mark": "?", "slash": "/", "plus": "+", "minus": "-", "equals_sign": "=",
             "escape": "esc", "enter": "enter"}
    return ",".join(names.get(key, key) for key in binding.key.split(","))


def own_bindings(node_type: type) -> list[Binding]:
    """The bindings the project's classes declare, parents first (a subclass's BINDINGS add to its
    bases'); Textual's own (tab, copy, ...) are the same everywhere and are left out."""
    seen: dict[str, Binding] = {}
    for cls in reversed(node_type.__mro__):
        if not cls.__module__.startswith("lat_tui."):
            continue
        for binding in vars(cls).get("BINDINGS", ()):
            for one in _as_bindings(binding):
                seen[one.action + one.key] = one
    return [b for b in seen.values() if b.description and b.system is False]


def _as_bindings(binding: BindingType) -> list[Binding]:
    return [binding] if isinstance(binding, Binding) else list(Binding.make_bindings([binding]))


def help_sections(screen: Screen) -> list[tuple[str, list[Binding]]]:
    """(title, bindings) for the screen, each of its own widgets that has keys, and the app."""
    sections = [(screen_title(screen), own_bindings(type(screen)))]
    for widget_type in _widget_types_with_keys(screen):
        sections.append((screen_title(widget_type), own_bindings(widget_type)))
    sections.append(("everywhere", own_bindings(type(screen.app))))
    return [(title, bindings) for title, bindings in sections if bindings]


def screen_title(node) -> str:
    """A screen's or widget's ``HELP_TITLE``, written for the person at the keyboard (docstrings
    and class names are for developers: "Dismisses with the new run's id", "FollowingLog")."""
    return getattr(node, "HELP_TITLE", "") or "Keys of this screen"


def _widget_types_with_keys(screen: Screen) -> list[type]:
    """The project's own widget classes on the screen that declare keys (Textual's stock widgets'
    keys are the usual arrows and are left out)."""
    found: list[type] = []
    for widget in screen.query(Widget):
        cls = type(widget)
        if cls.__module__.startswith("lat_tui.") and "BINDINGS" in vars(cls) and cls not in found:
            found.append(cls)
    return found


def help_text(sections: list[tuple[str, list[Binding]]]) -> Text:
    width = max((len(key_label(b)) for _, bindings in sections for b in bindings), default=1)
    text = Text()
    for title, bindings in sections:
        text.append(f"{title}\n", style="bold underline")
        for binding in bindings:
            text.append(f"  {key_label(binding):>{width}}  ", style="bold")
            text.append(f"{binding.tooltip or binding.description}\n")
        text.append("\n")
    return text


class HelpScreen(ModalScreen[None]):
    """Keys of the screen below; any of escape, q or ? closes it."""

    HELP_TITLE = "Keys"

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", key_display="esc")]

    def __init__(self, screen: Screen):
        super().__init__()
        self.sections = help_sections(screen)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static(help_text(self.sections), id="help-keys")
            yield Static("escape, q or ?: close", classes="hint-line")
