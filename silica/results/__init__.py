"""Result processors: turn what a tool printed into content blocks."""
