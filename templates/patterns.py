"""Names as people write them: patterns of names in braces — a channel's file name
(`{sku}_{channel}_{n}.jpg`), a layout's words (`到手价 {price}`) — and a name typed that
is not among the known ones (a channel, a layout), with its nearest."""

from __future__ import annotations

import difflib
import re
import string
from collections.abc import Iterable


def pattern_fields(pattern: str) -> list[str]:
    """The names a file pattern fills in; ValueError for a pattern that cannot be filled."""
    try:
        parsed = list(string.Formatter().parse(pattern))
    except ValueError as e:
        raise ValueError(f"not a pattern ({e}); write names in braces, such as {{sku}}") \
            from None
    names = []
    for _, field_name, spec, conversion in parsed:
        if field_name is None:
            continue
        if not field_name or spec or conversion or not re.fullmatch(r"[^{}\[\].!:]+",
                                                                     field_name):
            raise ValueError(f"{{{field_name}}} is not a plain name in braces")
        names.append(field_name)
    return names


class Unknown(Exception):
    """A name not among those known; `close`: the nearest one, if any."""

    def __init__(self, name: str, known: Iterable[str]):
        self.name, self.known = name, sorted(known)
        close = difflib.get_close_matches(name.lower(), self.known, n=1, cutoff=0.6)
        self.close = close[0] if close else None
        super().__init__(name)
