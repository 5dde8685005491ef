"""Constraint descriptions (``Grammar``) and, in later issues, the grammar lexer and parser."""
from __future__ import annotations

from .spec import Grammar

__all__ = ["Grammar"]
