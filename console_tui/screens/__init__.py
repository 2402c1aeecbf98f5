"""The console's screens and views."""
