"""The runstate HTTP server."""
