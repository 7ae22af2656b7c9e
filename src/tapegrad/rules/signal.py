"""Derivatives of the signal family (being filled in)."""

from __future__ import annotations
