"""Providers: each turns a ``Request`` of content blocks into its wire format and back."""
