"""Reference interpreters: the oracle of every differential test."""

from .stage1 import interpret

__all__ = ["interpret"]
