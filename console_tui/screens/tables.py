"""A view that is one table read from the server and refreshed in place: rows are updated cell
by cell and keyed, so a refresh never moves the cursor."""

from __future__ import annotations

import time
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.css.query import NoMatches
from textual.widgets import DataTable, Static

from console_tui.screens.base import Json, View

MIN_RELOAD_GAP = 0.25  # seconds between two reloads caused by events


class TableView(View):
    """Subclasses say the columns, how to fetch the items, an item's key and its cells."""

    COLUMNS: ClassVar[tuple[tuple[str, str, int], ...]] = ()
    POLL_SECONDS: ClassVar[float | None] = None  # also reload this often while shown
    DEFAULT_CSS = """
    TableView #bar { height: 1; background: $boost; padding: 0 1; }
    TableView DataTable { height: 1fr; }
    """

    def __init__(self) -> None:
        super().__init__(id=self.view_name)
        self.items: dict[str, Json] = {}
        self.stale = True
        self.last_reload = 0.0

    def compose(self) -> ComposeResult:
        yield Static("", id="bar")
        table: DataTable[Any] = DataTable(id="table", cursor_type="row", zebra_stripes=True)
        for key, label, width in self.COLUMNS:
            table.add_column(label, key=key, width=width)
        yield table

    @property
    def table(self) -> DataTable[Any]:
        return self.query_one("#table", DataTable)

    def focus_main(self) -> None:
        self.table.focus()

    async def fetch(self) -> list[Json]:
        raise NotImplementedError

    def key(self, item: Json) -> str:
        return str(item["name"])

    def cells(self, item: Json) -> list[Any]:
        raise NotImplementedError

    def bar(self) -> str:
        noun = self.title.lower()
        return f"1 {noun.removesuffix('s')}" if len(self.items) == 1 else f"{len(self.items)} {noun}"

    async def reload(self) -> None:
        self.last_reload = time.monotonic()
        self.stale = False
        items = await self.call(self.fetch())
        if items is None:
            return
        try:
            await self.enrich(items)
            self.show_items(items)
        except NoMatches:  # the view's table went while the fetch was out: the app is closing
            return

    async def enrich(self, items: list[Json]) -> None:
        """Fetch what the list lacks (subclasses)."""

    def show_items(self, items: list[Json]) -> None:
        table = self.table
        new = {self.key(i): i for i in items}
        for gone in set(self.items) - set(new):
            table.remove_row(gone)
        for key, item in new.items():
            cells = self.cells(item)
            if key in self.items:
                old = self.cells(self.items[key])
                for (col, _, _), a, b in zip(self.COLUMNS, old, cells, strict=True):
                    if a != b:
                        table.update_cell(key, col, b)
            else:
                table.add_row(*cells, key=key)
        self.items = new
        self.query_one("#bar", Static).update(self.bar())
        self.refresh_refusals()

    def current(self) -> Json | None:
        table = self.table
        if not table.row_count:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        except Exception:  # empty table
            return None
        return self.items.get(str(key))

    @on(DataTable.RowHighlighted)
    def _moved(self, event: DataTable.RowHighlighted) -> None:
        self.refresh_refusals()
        self.query_one("#bar", Static).update(self.bar())  # the bar may speak of the cursor's row

    def wants(self, event: Json) -> bool:
        """Whether an event makes this view stale."""
        return False

    def apply_events(self, events: list[Json]) -> None:
        if any(self.wants(e) for e in events):
            self.stale = True

    def tick(self) -> None:
        """Redraw what depends on the clock from the items we have."""
        if self.display and self.items and not self.console.fmt.masked:
            self.show_items(list(self.items.values()))

    async def maybe_reload(self) -> None:
        """Called by the app a few times a second while the view is shown."""
        now = time.monotonic()
        due_poll = self.POLL_SECONDS is not None and now - self.last_reload >= self.POLL_SECONDS
        if (self.stale and now - self.last_reload >= MIN_RELOAD_GAP) or due_poll:
            await self.reload()
