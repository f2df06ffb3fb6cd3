"""The toolbox: find tool files, read their specs, run them."""
