"""Images: sniffing, checking and fitting what tools emit."""
