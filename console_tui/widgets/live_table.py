"""A table for live data: fixed column widths, rows keyed, each row's line rendered once and kept
until that row (or the cursor on it) changes. Textual's DataTable forgets every rendered line after
any change and keeps its rows in structures that cost O(rows) to remove one; at a thousand events a
second that was most of the console's time. The cursor follows a row key, not a position: rows going
in or out above it move the view with it, so the row under the cursor stays where it was on screen."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

Cell = Text | str | int
PAD = 1  # blank cells either side of each column, as DataTable draws them


@dataclass(frozen=True)
class Column:
    """A column: its key, header label, width in cells, and which side its text keeps to."""

    key: str
    label: str
    width: int
    justify: Literal["left", "right"] = "left"


def _as_text(value: Cell) -> Text:
    # Plain text, never markup: a job name with [brackets] shows as typed.
    return value if isinstance(value, Text) else Text(str(value))


class LiveTable(ScrollView, can_focus=True):
    """Rows of cells under a header that stays put; one row has the cursor (`RowHighlighted` when
    it moves to another row, `RowSelected` on enter or a click on it)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first", "First", show=False),
        Binding("end", "last", "Last", show=False),
        Binding("enter", "select_cursor", "Select", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "live-table--header",
        "live-table--cursor",
        "live-table--even-row",
        "live-table--odd-row",
    }
    DEFAULT_CSS = """
    LiveTable {
        background: $surface;
        color: $foreground;
        height: 1fr;
        &:focus { background-tint: $foreground 5%; }
        & > .live-table--header { text-style: bold; background: $panel; color: $foreground; }
        & > .live-table--even-row { background: $surface-lighten-1 50%; }
        & > .live-table--odd-row { }
        & > .live-table--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus > .live-table--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
        &:dark > .live-table--even-row { background: $surface-darken-1 40%; }
    }
    """

    class RowHighlighted(Message):
        """The cursor is on another row (`key` None: the table is empty)."""

        def __init__(self, table: LiveTable, key: str | None) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> LiveTable:
            return self.table

    class RowSelected(Message):
        """Enter, or a click on the cursor's row."""

        def __init__(self, table: LiveTable, key: str) -> None:
            super().__init__()
            self.table = table
            self.key = key

        @property
        def control(self) -> LiveTable:
            return self.table

    def __init__(self, columns: Sequence[Column], *, zebra_stripes: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.columns = tuple(columns)
        self.zebra_stripes = zebra_stripes
        self._column_index = {c.key: i for i, c in enumerate(self.columns)}
        self._line_width = sum(c.width + 2 * PAD for c in self.columns)
        self._keys: list[str] = []
        self._index: dict[str, int] = {}
        self._cells: dict[str, tuple[Text, ...]] = {}
        self._lines: dict[tuple[str, str], tuple[Style, Strip]] = {}  # (row key, look) -> the row drawn
        self._header: tuple[Style, Strip] | None = None
        self._cursor: str | None = None
        self._cursor_row = 0  # where the cursor was, for when its row goes
        self._batch_depth = 0
        self._batch_anchor: tuple[str | None, int] = (None, 0)
        self._structure_changed = False
        self.virtual_size = Size(self._line_width, 1)

    # -- reading

    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def keys(self) -> list[str]:
        """The row keys, top to bottom."""
        return list(self._keys)

    @property
    def cursor_key(self) -> str | None:
        return self._cursor

    @property
    def cursor_row(self) -> int:
        return self._index[self._cursor] if self._cursor is not None else 0

    def __contains__(self, key: object) -> bool:
        return key in self._cells

    def get_row_index(self, key: str) -> int:
        return self._index[key]

    def get_cell(self, key: str, column: str) -> Text:
        return self._cells[key][self._column_index[column]]

    def get_row(self, key: str) -> tuple[Text, ...]:
        return self._cells[key]

    # -- changing (several changes in one `with table.changes():` settle the cursor and view once)

    @contextlib.contextmanager
    def changes(self) -> Iterator[None]:
        """Group changes: the cursor's row keeps its place on screen across all of them."""
        if self._batch_depth == 0:
            self._batch_anchor = (self._cursor, self.cursor_row - self._top)
            self._structure_changed = False
        self._batch_depth += 1
        try:
            yield
        finally:
            self._batch_depth -= 1
            if self._batch_depth == 0 and self._structure_changed:
                self._settle()

    def set_rows(self, rows: Iterable[tuple[str, Sequence[Cell]]]) -> None:
        """Replace every row (in this order); the cursor stays on its key if that is still here."""
        with self.changes():
            self._keys = []
            self._cells = {}
            self._lines.clear()
            for key, cells in rows:
                self._keys.append(key)
                self._cells[key] = self._texts(cells)
            self._structure_changed = True

    def put(self, key: str, cells: Sequence[Cell], *, before: str | None = None) -> None:
        """Add a row (at the bottom, or above `before`), or change the cells of the row `key`."""
        texts = self._texts(cells)
        if key in self._cells:
            if texts != self._cells[key]:
                self._cells[key] = texts
                self._row_changed(key)
            return
        with self.changes():
            self._cells[key] = texts
            if before is not None and before in self._cells:
                self._keys.insert(self._keys.index(before), key)
            else:
                self._keys.append(key)
            self._structure_changed = True

    def update_cell(self, key: str, column: str, value: Cell) -> None:
        """Change one cell (nothing is redrawn if it is the same)."""
        cells = list(self._cells[key])
        i = self._column_index[column]
        text = _as_text(value)
        if cells[i] != text:
            cells[i] = text
            self._cells[key] = tuple(cells)
            self._row_changed(key)

    def remove_rows(self, *keys: str) -> None:
        """Remove rows (unknown keys are ignored)."""
        gone = {k for k in keys if k in self._cells}
        if not gone:
            return
        with self.changes():
            self._keys = [k for k in self._keys if k not in gone]
            for key in gone:
                del self._cells[key]
                self._forget(key)
            self._structure_changed = True

    def sort(self, key: Callable[[str], Any], *, reverse: bool = False) -> None:
        """Order the rows by `key(row key)`."""
        with self.changes():
            self._keys.sort(key=key, reverse=reverse)
            self._structure_changed = True

    def clear(self) -> None:
        self.set_rows(())

    def move_cursor(self, *, row: int | None = None, key: str | None = None, scroll: bool = True) -> None:
        """Put the cursor on a row (by index or key) and, with `scroll`, bring it into view."""
        if key is None and row is not None and self._keys:
            key = self._keys[max(0, min(row, len(self._keys) - 1))]
        if key is None or key not in self._index:
            return
        self._set_cursor(key)
        if scroll:
            self._scroll_into_view()

    # -- internals

    @property
    def _top(self) -> int:
        return round(self.scroll_y)

    @property
    def _rows_shown(self) -> int:
        return max(1, self.scrollable_content_region.height - 1)

    def _texts(self, cells: Sequence[Cell]) -> tuple[Text, ...]:
        if len(cells) != len(self.columns):
            raise ValueError(f"{len(cells)} cells for {len(self.columns)} columns")
        return tuple(_as_text(c) for c in cells)

    def _forget(self, key: str) -> None:
        for look in ("even", "odd", "cursor", "cursor-focus"):
            self._lines.pop((key, look), None)

    def _row_changed(self, key: str) -> None:
        self._forget(key)
        row = self._index.get(key)
        if row is not None and self._top <= row < self._top + self._rows_shown:
            self.refresh_line(row + 1)  # +1: the header; refresh_line takes the virtual line

    def _settle(self) -> None:
        """After rows went in, out or moved: index them, keep the cursor's row where it was on screen."""
        self._index = {k: i for i, k in enumerate(self._keys)}
        anchor, offset = self._batch_anchor
        self.virtual_size = Size(self._line_width, len(self._keys) + 1)
        if anchor is not None and anchor in self._index:
            row = self._index[anchor]
            self._cursor_row = row
            self._scroll_top_to(max(0, row - max(0, offset)))
        elif self._keys:
            row = max(0, min(self._cursor_row, len(self._keys) - 1))
            self._set_cursor(self._keys[row])
            self._scroll_into_view()
        else:
            self._set_cursor(None)
        self.refresh()

    def _set_cursor(self, key: str | None) -> None:
        if key == self._cursor:
            return
        old, self._cursor = self._cursor, key
        for k in (old, key):
            if k is not None and k in self._cells:
                self._row_changed(k)
        if key is not None:
            self._cursor_row = self._index[key]
        self.post_message(self.RowHighlighted(self, key))

    def _scroll_top_to(self, y: int) -> None:
        if y != self._top:
            self.scroll_to(y=y, animate=False, immediate=True)

    def _scroll_into_view(self) -> None:
        row, top, shown = self.cursor_row, self._top, self._rows_shown
        if row < top:
            self._scroll_top_to(row)
        elif row >= top + shown:
            self._scroll_top_to(row - shown + 1)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines.clear()
        self._header = None

    def _on_focus(self, event: events.Focus) -> None:
        if self._cursor is not None:
            self._row_changed(self._cursor)

    def _on_blur(self, event: events.Blur) -> None:
        if self._cursor is not None:
            self._row_changed(self._cursor)

    # -- drawing

    def _draw(self, cells: Sequence[Text], style: Style, *, over: Style | None = None) -> Strip:
        line = Text(no_wrap=True, end="")
        for column, cell in zip(self.columns, cells, strict=True):
            text = cell.copy()
            text.truncate(column.width, overflow="ellipsis")
            room = " " * (column.width - text.cell_len)
            line.append(" " * PAD)
            if column.justify == "right" or text.justify == "right":
                line.append(room)
                line.append_text(text)
            else:
                line.append_text(text)
                line.append(room)
            line.append(" " * PAD)
        if over is not None:
            line.stylize(over)
        # Text.render leaves the text's own style to the caller: put it under every segment here
        return Strip(list(line.render(self.app.console)), self._line_width).apply_style(style)

    def _look(self, look: str) -> Style:
        """The style of a kind of row (the cursor's, a stripe, the header)."""
        if look.startswith("cursor"):
            name = "live-table--cursor"
        elif look == "header":
            name = "live-table--header"
        else:
            name = f"live-table--{look}-row" if self.zebra_stripes else "live-table--odd-row"
        return self.get_component_rich_style(name)

    def _row_line(self, row: int) -> tuple[Strip, Style]:
        key = self._keys[row]
        look = "odd" if row % 2 else "even"
        if key == self._cursor:
            look = "cursor-focus" if self.has_focus else "cursor"
        style = self._look(look)
        drawn = self._lines.get((key, look))
        if drawn is None or drawn[0] != style:  # a row, or the theme, changed
            if look.startswith("cursor"):
                drawn = style, self._draw(self._cells[key], Style(), over=style)
            else:
                drawn = style, self._draw(self._cells[key], style)
            self._lines[(key, look)] = drawn
        return drawn[1], style

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        x = round(self.scroll_x)
        base = self.rich_style
        if y == 0:
            style = self._look("header")
            if self._header is None or self._header[0] != style:
                self._header = style, self._draw([Text(c.label) for c in self.columns], style)
            strip = self._header[1]
        else:
            row = self._top + y - 1
            if row >= len(self._keys):
                return Strip.blank(width, base)
            strip, style = self._row_line(row)
        # the row's background goes on to the right edge, past the last column
        return strip.crop_extend(x, x + width, style).apply_style(base)

    # -- keys and mouse

    def action_cursor_up(self) -> None:
        self.move_cursor(row=self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(row=self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(row=self.cursor_row - self._rows_shown)

    def action_page_down(self) -> None:
        self.move_cursor(row=self.cursor_row + self._rows_shown)

    def action_first(self) -> None:
        self.move_cursor(row=0)

    def action_last(self) -> None:
        self.move_cursor(row=len(self._keys) - 1)

    def action_select_cursor(self) -> None:
        if self._cursor is not None:
            self.post_message(self.RowSelected(self, self._cursor))

    async def _on_click(self, event: events.Click) -> None:
        row = self._top + event.y - 1
        if event.y < 1 or row >= len(self._keys):
            return
        key = self._keys[row]
        if key == self._cursor:
            self.post_message(self.RowSelected(self, key))
        else:
            self.move_cursor(key=key)
