from typing import Any

NOT_WALKED: int
NAMES_FULL: int

def pack(
    mapping: Any, limit: int, names: bytearray, ends: bytearray, values: bytearray, /
) -> int: ...
def same(
    mapping: Any, count: int, names: bytearray, ends: bytearray, values: bytearray, /
) -> bool: ...
