"""JobDeck's schema migrations, shipped inside the package as data.

One folder per database engine (`sqlite/`, `postgres/`) of numbered SQL files
`NNNN_what_it_does.sql`, applied in number order, each once. Numbers run 1, 2, 3, ... without
gaps or repeats in each folder: take the next free number on main when you add one.
`core.store.schema` reads them with importlib.resources, so they are found the same way in a
checkout, an editable install and a wheel. There is no Python code here; this module only makes
the folder a package whose files ship in the wheel (pyproject's package-data).
"""
