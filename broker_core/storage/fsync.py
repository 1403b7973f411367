"""Durability helpers shared by everything that writes files the broker must find again after a crash
(the file store, the trace writer)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make a folder's entries (a new or renamed file) survive a crash, not only the files' contents."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
