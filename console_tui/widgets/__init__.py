"""Small widgets shared by the console's screens."""
