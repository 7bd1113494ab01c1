"""Durability: the journal the kernel writes its records to."""

from .journal import Durable, Journal, MemoryJournal

__all__ = ["Durable", "Journal", "MemoryJournal"]
