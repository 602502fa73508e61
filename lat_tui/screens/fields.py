"""Moving between a form's fields so that keys typed ahead land in the field they were typed for.

The app hands each key to the widget focused when the app handles it, and queues it there. A focus
moved by the field being left (``tab`` bubbling up from it to the app's binding, ``Input.Submitted``
handled by the screen) moves only after the keys typed behind it were queued for that field: on a
loaded machine the start of the next field's text landed at the end of the last one's. A priority
binding runs in the app's own handling of the key, so the focus has moved before the next key is
handed on.
"""

from __future__ import annotations

from textual.binding import Binding

FIELD_KEYS = [
    Binding("tab", "focus_field(1)", "Next field", show=False, priority=True),
    Binding("shift+tab", "focus_field(-1)", "Previous field", show=False, priority=True),
]


class FieldFocus:
    """For a Screen whose BINDINGS include FIELD_KEYS."""

    def action_focus_field(self, step: int) -> None:
        self.focus_next() if step > 0 else self.focus_previous()  # type: ignore[attr-defined]
