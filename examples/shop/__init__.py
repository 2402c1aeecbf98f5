"""An example project whose jobs run on JobDeck agents (see examples/README.md)."""
