"""What a tool may see and what silica may print: environment grants, trusted folders, and
outside text made safe for the terminal."""
