"""Argument types that refuse a bad value at parse time, in argparse's own words.

A negative ``--max-bytes`` had reached ``read()`` and ended in a traceback; a certificate was issued
for a Service name Kubernetes would never accept. argparse prints ``argument --x: <message>`` and
exits 2, as for any other usage error.
"""

from __future__ import annotations

import argparse
import re

__all__ = ["dns1035_label", "dns1123_label", "positive_int", "positive_seconds"]

_DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_MAX_LABEL = 63


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}") from None
    if not value > 0 or value == float("inf"):  # NaN compares false
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


def dns1123_label(text: str) -> str:
    """A namespace name: lowercase letters, digits and '-', starting and ending with one of the
    first two, at most 63 characters (Kubernetes' IsDNS1123Label)."""
    if len(text) > _MAX_LABEL or not _DNS1123_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a valid name: lowercase letters, digits and '-', starting and ending "
            f"with a letter or digit, at most {_MAX_LABEL} characters"
        )
    return text


def dns1035_label(text: str) -> str:
    """A Service name: as a DNS-1123 label, but starting with a letter (IsDNS1035Label)."""
    if len(text) > _MAX_LABEL or not _DNS1035_LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a valid Service name: lowercase letters, digits and '-', starting with "
            f"a letter and ending with a letter or digit, at most {_MAX_LABEL} characters"
        )
    return text
