"""silica's built-in behaviour, written as plugins against ``silica.hookspecs``."""
