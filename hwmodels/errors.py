"""The root of the errors a user can meet: `PorterError`.

It lives in the lowest package so every package can derive from it without importing one
above it; `porter.errors` (the catalog) re-exports it and holds the porter's own errors.
"""

from __future__ import annotations


class PorterError(Exception):
    """Base of every user-facing error; the CLI prints it as one line and exits 2."""
