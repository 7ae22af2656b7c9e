"""Derivatives of the fft family (being filled in)."""

from __future__ import annotations
