"""The pure scheduling core: data in, decisions out. No clock, I/O or randomness here."""
