"""The compiled JSON reader: the dense event parser and the numba JSON kernels it is built from.

:func:`parse_dense` reads a whole batch of record values (one joined byte buffer) in one numba
pass and fills the feature matrix directly, without creating a Python object per number. It
accepts only a strict subset of valid events and reports every other record as *escalated*; the
caller then runs those through orjson and, if needed, the precise diagnosis. It never rejects and
never guesses: a record it accepts is one the precise path accepts, with bit-identical values.

Accepted here
    ASCII-only records: ``{`` members ``}`` where the members are ``features`` (an array of exactly
    ``n_features`` JSON numbers), ``label`` (a JSON integer of at most 18 digits or a string
    without escapes, known to the label table), and optionally ``id`` (a string without escapes
    of 1 to ``max_id_length`` characters) and ``ts`` (epoch seconds in range, or an RFC 3339
    date-time on a real calendar day), each at most once, JSON whitespace anywhere allowed.
Escalated
    Anything else: other or repeated keys, escapes, non-ASCII bytes, booleans, nulls, nested
    values, numbers with more than 19 significant digits, numbers whose double is subnormal or
    infinite, trailing bytes, and so on.

Kernels for other compiled readers
    The service's ``POST /predict`` body reader and the hashed-event reader
    (:mod:`consumers.decoding.fastsparse`) build on the same kernels, so they convert
    numbers and recognises tokens exactly as the decoder does. Each reads a ``uint8`` array
    ``data`` between ``position`` and ``end`` and answers ``-1`` where it cannot decide (the
    caller then takes its general path): :func:`skip_space`, :func:`plain_string_end`,
    :func:`matches`, :func:`parse_number` (a JSON number, bit-identical to ``float()`` and
    orjson) and :func:`read_number_array` (an array of an exact number of bounded numbers, into a
    row of a matrix); the last two take the ``(high, low)`` tables of :func:`powers_of_five`.
    An event's members are read by :func:`member_key` (a known key, once: codes ``KEY_*``, one
    bit each, :data:`REQUIRED_KEYS` the required ones), :func:`scalar_member` (a ``label``,
    ``id`` or ``ts`` value) and :func:`member_end`; :func:`event_id_reader` decodes the ids found.
    Call them from code compiled with :func:`learning.jit.jit_no_runtime`. The structural bytes
    of the grammar are :data:`QUOTE`, :data:`COMMA`, :data:`COLON`, :data:`OPEN_BRACE`,
    :data:`CLOSE_BRACE`, :data:`OPEN_BRACKET` and :data:`CLOSE_BRACKET`.

Numbers are converted with the Clinger fast path when it is exact, else with the Eisel-Lemire
algorithm (Lemire, "Number parsing at a gigabyte per second", 2021; the 128-bit product needs no
fallback for 19-digit significands: Mushtak and Lemire, "Fast number parsing without fallback",
2023). Both round to nearest, ties to even, exactly like ``float()`` and orjson. A JSON integer
converts like ``float(int(token))``, so ``-0`` gives ``0.0`` while ``-0.0`` gives ``-0.0``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from learning.jit import intrinsic, jit_no_runtime

logger = logging.getLogger(__name__)

SMALLEST_POWER_OF_TEN = -342
LARGEST_POWER_OF_TEN = 308
MAX_SIGNIFICANT_DIGITS = 19
MAX_LABEL_DIGITS = 18
MAX_LABEL_VALUE = 10**MAX_LABEL_DIGITS
MAX_EXPONENT_DIGITS_VALUE = 100_000
CLINGER_MAX_POWER = 22
CLINGER_MAX_SIGNIFICAND = 1 << 53
ROUND_TO_EVEN_MIN_POWER = -4
ROUND_TO_EVEN_MAX_POWER = 23
MANTISSA_BITS = 52
INFINITE_POWER = 0x7FF
EXPONENT_BIAS = 1023

_U64_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_U32_MASK = np.uint64(0xFFFFFFFF)
_U32_SHIFT = np.uint64(32)
_PRECISION_MASK = np.uint64(0x1FF)
_U_ONE = np.uint64(1)
_U_THREE = np.uint64(3)
_U_ZERO = np.uint64(0)
_U_TEN = np.uint64(10)
_U_63 = np.uint64(63)
_U_NINE = np.uint64(9)
_IMPLICIT_BIT = np.uint64(1 << MANTISSA_BITS)
_EXPLICIT_MASK = np.uint64((1 << MANTISSA_BITS) - 1)
_SIGN_BIT = np.uint64(1 << 63)
_U_HUNDRED_MILLION = np.uint64(100_000_000)
_SWAR_ZEROS = np.uint64(0x3030303030303030)
_SWAR_ABOVE_NINE = np.uint64(0x4646464646464646)
_SWAR_HIGH_BITS = np.uint64(0x8080808080808080)
_SWAR_MASK = np.uint64(0x000000FF000000FF)
_SWAR_MUL1 = np.uint64(100 + (1_000_000 << 32))
_SWAR_MUL2 = np.uint64(1 + (10_000 << 32))
_OVERFLOW_MANTISSA = np.uint64(2 << MANTISSA_BITS)

# Structural bytes of the JSON grammar (other compiled readers use them too).
QUOTE = 0x22
COMMA = 0x2C
COLON = 0x3A
OPEN_BRACE = 0x7B
CLOSE_BRACE = 0x7D
OPEN_BRACKET = 0x5B
CLOSE_BRACKET = 0x5D
# Bytes inside tokens, and white space.
_BACKSLASH = 0x5C
_MINUS = 0x2D
_PLUS = 0x2B
_DOT = 0x2E
_ZERO = 0x30
_NINE = 0x39
_LOWER_E = 0x65
_UPPER_E = 0x45
_SPACE = 0x20
_TAB = 0x09
_NEWLINE = 0x0A
_RETURN = 0x0D
_LAST_ASCII = 0x7E
_UPPER_T = 0x54
_LOWER_T = 0x74
_UPPER_Z = 0x5A
_LOWER_Z = 0x7A

# Keys, as codes (a set of keys seen: one bit 1 << code each).
KEY_FEATURES = 0
KEY_LABEL = 1
KEY_ID = 2
KEY_TS = 3
REQUIRED_KEYS = (1 << KEY_FEATURES) | (1 << KEY_LABEL)

MIN_EPOCH_SECONDS = -62_167_219_200.0
"""0000-01-01T00:00:00Z: the earliest ``ts`` in epoch seconds."""
MAX_EPOCH_SECONDS = 253_402_300_800.0
"""10000-01-01T00:00:00Z: the first epoch second past the latest ``ts`` (exclusive)."""
_POWERS_OF_TEN = np.array([10.0**k for k in range(CLINGER_MAX_POWER + 1)], dtype=np.float64)
_FEATURES_KEY = np.frombuffer(b"features", dtype=np.uint8)
_LABEL_KEY = np.frombuffer(b"label", dtype=np.uint8)
DAYS_IN_MONTH = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
_LEAP_FEBRUARY = 29
_FEBRUARY = 2
_LAST_HOUR = 23
_LAST_MINUTE = 59
_LEAP_SECOND = 60
_MONTHS = 12
_CENTURY = 100
_QUADRICENTURY = 400
_LEAP_CYCLE = 4
_RFC3339_MIN_LENGTH = 20
_RFC3339_OFFSET_LENGTH = 6


@functools.cache
def powers_of_five() -> tuple[np.ndarray, np.ndarray]:
    """High and low 64-bit words of the 128-bit normalised powers of five, 5^-342 to 5^308.

    Built with exact integer arithmetic the way fast_float's table generator builds them:
    truncated for non-negative exponents, rounded up for negative ones.
    """
    high: list[int] = []
    low: list[int] = []
    word = (1 << 64) - 1
    for q in range(SMALLEST_POWER_OF_TEN, LARGEST_POWER_OF_TEN + 1):
        if q < 0:
            power5 = 5**-q
            z = power5.bit_length()
            # 2**(z-1) < 5**-q < 2**z, and the quotient below has 128 or more bits.
            b = z + 127 if q >= -27 else 2 * z + 2 * 64
            c = 2**b // power5 + 1
            while c >= 1 << 128:
                c //= 2
        else:
            c = 5**q
            while c < 1 << 127:
                c *= 2
            while c >= 1 << 128:
                c //= 2
        high.append(c >> 64)
        low.append(c & word)
    return np.array(high, dtype=np.uint64), np.array(low, dtype=np.uint64)


def _multiply_intrinsic(typingctx: Any, a: Any, b: Any) -> Any:  # pragma: no cover - compiled
    """The full 128-bit product of two uint64, as (high, low)."""
    from llvmlite import ir  # type: ignore[import-untyped]  # noqa: PLC0415
    from numba.core import types  # noqa: PLC0415 - numba on first use

    signature = types.UniTuple(types.uint64, 2)(types.uint64, types.uint64)  # type: ignore[no-untyped-call]

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        wide = ir.IntType(128)
        word = ir.IntType(64)
        product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        high = builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), word)
        low = builder.trunc(product, word)
        return context.make_tuple(builder, sig.return_type, [high, low])

    return signature, codegen


def _leading_zeros_intrinsic(typingctx: Any, value: Any) -> Any:  # pragma: no cover - compiled
    """Number of leading zero bits of a uint64 (64 for zero)."""
    from llvmlite import ir  # noqa: PLC0415 - numba on first use
    from numba.core import cgutils, types  # noqa: PLC0415 - numba on first use

    signature = types.uint64(types.uint64)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        word = ir.IntType(64)
        function_type = ir.FunctionType(word, [word, ir.IntType(1)])
        ctlz = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module, function_type, "llvm.ctlz.i64"
        )
        return builder.call(ctlz, [args[0], ir.Constant(ir.IntType(1), 0)])

    return signature, codegen


def _bits_to_double_intrinsic(typingctx: Any, bits: Any) -> Any:  # pragma: no cover - compiled
    """The double whose IEEE 754 bit pattern is ``bits``."""
    from llvmlite import ir  # noqa: PLC0415 - numba on first use
    from numba.core import types  # noqa: PLC0415 - numba on first use

    signature = types.float64(types.uint64)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.bitcast(args[0], ir.DoubleType())

    return signature, codegen


def _load_word_intrinsic(
    typingctx: Any, data: Any, position: Any
) -> Any:  # pragma: no cover - compiled
    """The 8 bytes at ``data[position:position + 8]`` as one little-endian uint64 (one load).

    The caller guarantees ``position + 8 <= len(data)``.
    """
    from llvmlite import ir  # noqa: PLC0415 - numba on first use
    from numba.core import types  # noqa: PLC0415 - numba on first use

    signature = types.uint64(data, types.intp)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        array = context.make_array(sig.args[0])(context, builder, args[0])
        pointer = builder.gep(array.data, [args[1]])
        word_pointer = builder.bitcast(pointer, ir.IntType(64).as_pointer())
        return builder.load(word_pointer, align=1)

    return signature, codegen


_multiply: Any = intrinsic(_multiply_intrinsic)
_leading_zeros: Any = intrinsic(_leading_zeros_intrinsic)
_bits_to_double: Any = intrinsic(_bits_to_double_intrinsic)
_load_word: Any = intrinsic(_load_word_intrinsic)


@jit_no_runtime
def _eight_digits(data: Any, position: int) -> tuple[bool, Any]:  # pragma: no cover - compiled
    """(True, value) when data[position:position + 8] are eight ASCII digits (SWAR, no loop)."""
    word = _load_word(data, position)
    if ((word + _SWAR_ABOVE_NINE) | (word - _SWAR_ZEROS)) & _SWAR_HIGH_BITS:
        return False, _U_ZERO
    word = word - _SWAR_ZEROS
    word = word * _U_TEN + (word >> np.uint64(8))
    word = (
        (word & _SWAR_MASK) * _SWAR_MUL1 + ((word >> np.uint64(16)) & _SWAR_MASK) * _SWAR_MUL2
    ) >> _U32_SHIFT
    return True, word & _U32_MASK


@jit_no_runtime
def decimal_to_double(
    significand: Any, power: int, negative: bool, high: Any, low: Any
) -> tuple[bool, float]:  # pragma: no cover - compiled
    """significand * 10^power rounded to the nearest double; (False, 0) when not decided here.

    Not decided: subnormal or infinite results and powers outside the table.
    """
    if significand == _U_ZERO:
        return True, -0.0 if negative else 0.0
    if -CLINGER_MAX_POWER <= power <= CLINGER_MAX_POWER and significand <= np.uint64(
        CLINGER_MAX_SIGNIFICAND
    ):
        scale = _POWERS_OF_TEN[abs(power)]
        value = float(significand) / scale if power < 0 else float(significand) * scale
        return True, -value if negative else value
    if power < SMALLEST_POWER_OF_TEN or power > LARGEST_POWER_OF_TEN:
        return False, 0.0
    zeros = _leading_zeros(significand)
    w = significand << zeros
    index = power - SMALLEST_POWER_OF_TEN
    upper, lower = _multiply(w, high[index])
    if upper & _PRECISION_MASK == _PRECISION_MASK:
        second_upper, _ = _multiply(w, low[index])
        lower = lower + second_upper
        if second_upper > lower:
            upper = upper + _U_ONE
    upperbit = upper >> _U_63
    shift = upperbit + _U_NINE
    mantissa = upper >> shift
    power2 = ((217706 * power) >> 16) + 63 + int(upperbit) - int(zeros) + EXPONENT_BIAS
    if power2 <= 0:
        return False, 0.0
    if (
        lower <= _U_ONE
        and ROUND_TO_EVEN_MIN_POWER <= power <= ROUND_TO_EVEN_MAX_POWER
        and mantissa & _U_THREE == _U_ONE
        and (mantissa << shift) == upper
    ):
        mantissa = mantissa & (_U64_ALL ^ _U_ONE)
    mantissa = mantissa + (mantissa & _U_ONE)
    mantissa = mantissa >> _U_ONE
    if mantissa >= _OVERFLOW_MANTISSA:
        mantissa = _IMPLICIT_BIT
        power2 += 1
    if power2 >= INFINITE_POWER:
        return False, 0.0
    bits = (mantissa & _EXPLICIT_MASK) | (np.uint64(power2) << np.uint64(MANTISSA_BITS))
    if negative:
        bits |= _SIGN_BIT
    return True, _bits_to_double(bits)


@jit_no_runtime
def skip_space(data: Any, position: int, end: int) -> int:  # pragma: no cover - compiled
    """The first position at or after ``position`` that is not JSON white space."""
    while position < end:
        byte = data[position]
        if byte != _SPACE and byte != _TAB and byte != _NEWLINE and byte != _RETURN:  # noqa: PLR1714
            break
        position += 1
    return position


@jit_no_runtime
def _is_digit(byte: int) -> bool:  # pragma: no cover - compiled
    return _ZERO <= byte <= _NINE


@jit_no_runtime
def _digits_run(
    data: Any, position: int, end: int, value: Any
) -> tuple[int, Any]:  # pragma: no cover
    """Accumulate the decimal digits at ``position`` into ``value``; (end of digits, value).

    Digits beyond what a uint64 holds wrap around; callers count digits and refuse those.
    """
    while position + 8 <= end:
        ok, chunk = _eight_digits(data, position)
        if not ok:
            break
        value = value * _U_HUNDRED_MILLION + chunk
        position += 8
    while position < end and _is_digit(data[position]):
        value = value * _U_TEN + np.uint64(data[position] - _ZERO)
        position += 1
    return position, value


@jit_no_runtime
def parse_number(
    data: Any, position: int, end: int, high: Any, low: Any
) -> tuple[int, float, bool]:  # pragma: no cover - compiled
    """(next position or -1 when not decided here, value, whether the token is an integer)."""
    negative = False
    if position < end and data[position] == _MINUS:
        negative = True
        position += 1
    if position >= end or not _is_digit(data[position]):
        return -1, 0.0, False
    zero_integer = data[position] == _ZERO
    if zero_integer:
        position += 1
        if position < end and _is_digit(data[position]):
            return -1, 0.0, False
        significand = _U_ZERO
        integer_digits = 1
    else:
        digits_start = position
        position, significand = _digits_run(data, position, end, _U_ZERO)
        integer_digits = position - digits_start
    fraction_digits = 0
    integer = True
    if position < end and data[position] == _DOT:
        integer = False
        fraction_start = position + 1
        position, significand = _digits_run(data, fraction_start, end, significand)
        fraction_digits = position - fraction_start
        if fraction_digits == 0:
            return -1, 0.0, False
    if integer_digits + fraction_digits > MAX_SIGNIFICANT_DIGITS:
        leading = 0
        if zero_integer:
            leading = 1
            while (
                leading - 1 < fraction_digits
                and data[position - fraction_digits + leading - 1] == _ZERO
            ):
                leading += 1
        if integer_digits + fraction_digits - leading > MAX_SIGNIFICANT_DIGITS:
            return -1, 0.0, False
    power = -fraction_digits
    if position < end and (data[position] == _LOWER_E or data[position] == _UPPER_E):
        integer = False
        position += 1
        exponent_negative = False
        if position < end and (data[position] == _MINUS or data[position] == _PLUS):
            exponent_negative = data[position] == _MINUS
            position += 1
        if position >= end or not _is_digit(data[position]):
            return -1, 0.0, False
        exponent = 0
        while position < end and _is_digit(data[position]):
            if exponent < MAX_EXPONENT_DIGITS_VALUE:
                exponent = exponent * 10 + (data[position] - _ZERO)
            position += 1
        power += -exponent if exponent_negative else exponent
    if integer and negative and significand == _U_ZERO:
        negative = False
    decided, value = decimal_to_double(significand, power, negative, high, low)
    if not decided:
        return -1, 0.0, False
    return position, value, integer


@jit_no_runtime
def read_number_array(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    position: int,
    end: int,
    row: Any,
    offset: int,
    count: int,
    max_abs: float,
    high: Any,
    low: Any,
) -> int:  # pragma: no cover - compiled
    """Read ``[n, ...]`` of exactly ``count`` numbers within ±``max_abs`` into ``row[offset:]``.

    Returns the position after the closing bracket, or -1 when not decided here.
    """
    if position >= end or data[position] != OPEN_BRACKET:
        return -1
    position = skip_space(data, position + 1, end)
    filled = 0
    while True:
        if filled >= count:
            return -1
        position, value, _ = parse_number(data, position, end, high, low)
        if position < 0 or not (-max_abs <= value <= max_abs):
            return -1
        row[offset + filled] = value
        filled += 1
        position = skip_space(data, position, end)
        if position < end and data[position] == COMMA:
            position = skip_space(data, position + 1, end)
            continue
        if position < end and data[position] == CLOSE_BRACKET:
            break
        return -1
    if filled != count:
        return -1
    return position + 1


@jit_no_runtime
def plain_string_end(data: Any, position: int, end: int) -> int:  # pragma: no cover - compiled
    """Index of the closing quote of a printable-ASCII string without escapes, else -1."""
    while position < end:
        byte = data[position]
        if byte == QUOTE:
            return position
        if byte < _SPACE or byte > _LAST_ASCII or byte == _BACKSLASH:
            return -1
        position += 1
    return -1


@jit_no_runtime
def matches(data: Any, start: int, stop: int, word: Any) -> bool:  # pragma: no cover
    """Whether data[start:stop] holds exactly the bytes of ``word``."""
    if stop - start != word.shape[0]:
        return False
    for i in range(word.shape[0]):  # noqa: SIM110 - a plain loop compiles to a tight loop
        if data[start + i] != word[i]:
            return False
    return True


@jit_no_runtime
def _key_code(data: Any, start: int, stop: int) -> int:  # pragma: no cover - compiled
    if matches(data, start, stop, _FEATURES_KEY):
        return KEY_FEATURES
    if matches(data, start, stop, _LABEL_KEY):
        return KEY_LABEL
    if stop - start == 2 and data[start + 1] == ord("d") and data[start] == ord("i"):
        return KEY_ID
    if stop - start == 2 and data[start + 1] == ord("s") and data[start] == ord("t"):
        return KEY_TS
    return -1


@jit_no_runtime
def _digits(data: Any, start: int, count: int) -> int:  # pragma: no cover - compiled
    """The number written by ``count`` ASCII digits at ``start``, or -1."""
    value = 0
    for i in range(start, start + count):
        if not _is_digit(data[i]):
            return -1
        value = value * 10 + (data[i] - _ZERO)
    return value


@jit_no_runtime
def _days_in_month(year: int, month: int, days: Any) -> int:  # pragma: no cover - compiled
    if month == _FEBRUARY and (
        year % _QUADRICENTURY == 0 or (year % _LEAP_CYCLE == 0 and year % _CENTURY != 0)
    ):
        return _LEAP_FEBRUARY
    return int(days[month - 1])


@jit_no_runtime
def rfc3339_valid(data: Any, start: int, stop: int, days: Any) -> bool:  # pragma: no cover
    """Whether data[start:stop] is an RFC 3339 date-time on a real calendar day."""
    if stop - start < _RFC3339_MIN_LENGTH:
        return False
    p = start
    year = _digits(data, p, 4)
    if year < 0 or data[p + 4] != _MINUS:
        return False
    month = _digits(data, p + 5, 2)
    if month < 1 or month > _MONTHS or data[p + 7] != _MINUS:
        return False
    day = _digits(data, p + 8, 2)
    if day < 1 or day > _days_in_month(year, month, days):
        return False
    if data[p + 10] != _UPPER_T and data[p + 10] != _LOWER_T:
        return False
    hour = _digits(data, p + 11, 2)
    minute = _digits(data, p + 14, 2)
    second = _digits(data, p + 17, 2)
    if data[p + 13] != COLON or data[p + 16] != COLON:
        return False
    if not (
        0 <= hour <= _LAST_HOUR and 0 <= minute <= _LAST_MINUTE and 0 <= second <= _LEAP_SECOND
    ):
        return False
    p += 19
    if data[p] == _DOT:
        p += 1
        if p >= stop or not _is_digit(data[p]):
            return False
        while p < stop and _is_digit(data[p]):
            p += 1
    if p >= stop:
        return False
    if data[p] == _UPPER_Z or data[p] == _LOWER_Z:
        return p + 1 == stop
    if data[p] != _PLUS and data[p] != _MINUS:
        return False
    if stop - p != _RFC3339_OFFSET_LENGTH or data[p + 3] != COLON:
        return False
    offset_hour = _digits(data, p + 1, 2)
    offset_minute = _digits(data, p + 4, 2)
    return 0 <= offset_hour <= _LAST_HOUR and 0 <= offset_minute <= _LAST_MINUTE


@jit_no_runtime
def _label_slot(  # noqa: PLR0917 - numba kernels take positional arguments
    data: Any,
    start: int,
    stop: int,
    is_string: bool,
    int_labels: Any,
    text_bytes: Any,
    text_starts: Any,
    text_stops: Any,
) -> int:  # pragma: no cover - compiled
    """Index of the label in the label table (integers first, then strings), else -1."""
    if not is_string:
        negative = data[start] == _MINUS
        p = start + 1 if negative else start
        if p >= stop or stop - p > MAX_LABEL_DIGITS or (data[p] == _ZERO and stop - p > 1):
            return -1
        value = _digits(data, p, stop - p)
        if value < 0:
            return -1
        if negative:
            value = -value
        for slot in range(int_labels.shape[0]):
            if int_labels[slot] == value:
                return slot
        return -1
    length = stop - start
    for slot in range(text_starts.shape[0]):
        label_start = text_starts[slot]
        if text_stops[slot] - label_start != length:
            continue
        same = True
        for i in range(length):
            if text_bytes[label_start + i] != data[start + i]:
                same = False
                break
        if same:
            return int(int_labels.shape[0]) + slot
    return -1


@jit_no_runtime
def _integer_token_end(data: Any, position: int, end: int) -> int:  # pragma: no cover
    """End of a JSON integer token (no fraction, no exponent), else -1."""
    p = position
    if p < end and data[p] == _MINUS:
        p += 1
    if p >= end or not _is_digit(data[p]):
        return -1
    while p < end and _is_digit(data[p]):
        p += 1
    if p < end and (data[p] == _DOT or data[p] == _LOWER_E or data[p] == _UPPER_E):
        return -1
    return p


@jit_no_runtime
def member_key(
    data: Any, position: int, end: int, seen: int
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """The key of the object member at ``position`` (white space allowed around it and the
    colon): (where its value starts, its code, ``seen`` with the key's bit set), or (-1, -1,
    ``seen``) unless it is a known key whose bit (1 << code) is not yet in ``seen``."""
    p = skip_space(data, position, end)
    if p >= end or data[p] != QUOTE:
        return -1, -1, seen
    key_stop = plain_string_end(data, p + 1, end)
    if key_stop < 0:
        return -1, -1, seen
    key = _key_code(data, p + 1, key_stop)
    if key < 0 or seen & (1 << key):
        return -1, -1, seen
    p = skip_space(data, key_stop + 1, end)
    if p >= end or data[p] != COLON:
        return -1, -1, seen
    p = skip_space(data, p + 1, end)
    if p >= end:
        return -1, -1, seen
    return p, key, seen | (1 << key)


@jit_no_runtime
def scalar_member(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    p: int,
    end: int,
    key: int,
    max_id_length: int,
    high: Any,
    low: Any,
    int_labels: Any,
    text_bytes: Any,
    text_starts: Any,
    text_stops: Any,
    days: Any,
) -> tuple[int, int, int, int]:  # pragma: no cover - compiled
    """The value at ``p`` of a ``label``, ``id`` or ``ts`` member (``key``): (the position after
    it, the label's slot, the id's start and stop), -1 for what the member does not give; the
    position is -1 when the value is not one the compiled readers accept."""
    if key == KEY_LABEL:
        if data[p] == QUOTE:
            stop = plain_string_end(data, p + 1, end)
            if stop < 0:
                return -1, -1, -1, -1
            label = _label_slot(
                data, p + 1, stop, True, int_labels, text_bytes, text_starts, text_stops
            )
            p = stop + 1
        else:
            stop = _integer_token_end(data, p, end)
            if stop < 0:
                return -1, -1, -1, -1
            label = _label_slot(
                data, p, stop, False, int_labels, text_bytes, text_starts, text_stops
            )
            p = stop
        if label < 0:
            return -1, -1, -1, -1
        return p, label, -1, -1
    if key == KEY_ID:
        if data[p] != QUOTE:
            return -1, -1, -1, -1
        stop = plain_string_end(data, p + 1, end)
        if stop < 0 or stop == p + 1 or stop - (p + 1) > max_id_length:
            return -1, -1, -1, -1
        return stop + 1, -1, p + 1, stop
    if data[p] == QUOTE:
        stop = plain_string_end(data, p + 1, end)
        if stop < 0 or not rfc3339_valid(data, p + 1, stop, days):
            return -1, -1, -1, -1
        return stop + 1, -1, -1, -1
    p, value, _ = parse_number(data, p, end, high, low)
    if p < 0 or not (MIN_EPOCH_SECONDS <= value < MAX_EPOCH_SECONDS):
        return -1, -1, -1, -1
    return p, -1, -1, -1


@jit_no_runtime
def member_end(data: Any, p: int, end: int) -> tuple[int, bool]:  # pragma: no cover - compiled
    """After a member's value: (the position after the comma, False) when another member
    follows, (the position after the closing brace, True) at the object's end, else (-1, _)."""
    p = skip_space(data, p, end)
    if p < end and data[p] == COMMA:
        return p + 1, False
    if p < end and data[p] == CLOSE_BRACE:
        return p + 1, True
    return -1, True


@jit_no_runtime
def _parse_record(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    start: int,
    end: int,
    row: Any,
    offset: int,
    n_features: int,
    max_id_length: int,
    max_abs: float,
    high: Any,
    low: Any,
    int_labels: Any,
    text_bytes: Any,
    text_starts: Any,
    text_stops: Any,
    days: Any,
) -> tuple[int, int, int]:  # pragma: no cover - compiled
    """(label slot or -1 when escalated, id start, id stop) for one record."""
    seen = 0
    label = -1
    id_start = -1
    id_stop = -1
    p = skip_space(data, start, end)
    if p >= end or data[p] != OPEN_BRACE:
        return -1, -1, -1
    p += 1
    closed = False
    while not closed:
        p, key, seen = member_key(data, p, end, seen)
        if p < 0:
            return -1, -1, -1
        if key == KEY_FEATURES:
            p = read_number_array(data, p, end, row, offset, n_features, max_abs, high, low)
        else:
            p, slot, first, last = scalar_member(
                data, p, end, key, max_id_length, high, low,
                int_labels, text_bytes, text_starts, text_stops, days,
            )  # fmt: skip
            if key == KEY_LABEL:
                label = slot
            elif key == KEY_ID:
                id_start, id_stop = first, last
        if p < 0:
            return -1, -1, -1
        p, closed = member_end(data, p, end)
        if p < 0:
            return -1, -1, -1
    if skip_space(data, p, end) != end or seen & REQUIRED_KEYS != REQUIRED_KEYS:
        return -1, -1, -1
    return label, id_start, id_stop


@jit_no_runtime
def _parse_all(  # noqa: PLR0917 - numba kernels take positional arrays
    data: Any,
    starts: Any,
    stops: Any,
    X: Any,
    bias: bool,
    n_features: int,
    max_id_length: int,
    max_abs: float,
    high: Any,
    low: Any,
    int_labels: Any,
    text_bytes: Any,
    text_starts: Any,
    text_stops: Any,
    days: Any,
    slots: Any,
    id_starts: Any,
    id_stops: Any,
) -> int:  # pragma: no cover - compiled
    offset = 1 if bias else 0
    accepted = 0
    for i in range(starts.shape[0]):
        slot, id_start, id_stop = _parse_record(
            data,
            starts[i],
            stops[i],
            X[i],
            offset,
            n_features,
            max_id_length,
            max_abs,
            high,
            low,
            int_labels,
            text_bytes,
            text_starts,
            text_stops,
            days,
        )
        slots[i] = slot
        id_starts[i] = id_start
        id_stops[i] = id_stop
        if slot >= 0:
            accepted += 1
            if bias:
                X[i, 0] = 1.0
    return accepted


@dataclass(frozen=True, slots=True, kw_only=True)
class DenseParse:
    """The outcome of :func:`parse_dense` on one batch.

    Attributes
    ----------
    X
        One row per record; rows of escalated records hold garbage.
    slots
        Label-table slot per record, -1 for an escalated record.
    id_starts, id_stops
        Where each record's ``id`` lies in ``buffer`` (-1 when it has none).
    buffer
        The joined record values.
    accepted
        How many records were accepted.
    """

    X: np.ndarray
    slots: np.ndarray
    id_starts: np.ndarray
    id_stops: np.ndarray
    buffer: bytes
    accepted: int

    def rows(self, accepted: np.ndarray | None) -> np.ndarray:
        """The rows of the records ``accepted`` (a mask; ``None``: every record)."""
        return self.X if accepted is None else self.X[accepted]

    def event_ids(self, records: np.ndarray) -> Callable[[], list[str | None]]:
        """A function giving the ``id`` of each of ``records`` (``None`` when it has none)."""
        return event_id_reader(self.buffer, self.id_starts[records], self.id_stops[records])


def event_id_reader(
    buffer: bytes, starts: np.ndarray, stops: np.ndarray
) -> Callable[[], list[str | None]]:
    """A function giving the ids lying at ``buffer[start:stop]`` (``None`` where start is -1)."""

    def decode() -> list[str | None]:
        return [
            buffer[start:stop].decode("ascii") if start >= 0 else None
            for start, stop in zip(starts.tolist(), stops.tolist(), strict=True)
        ]

    return decode


class LabelTable:
    """Labels the compiled parser recognises (JSON integers first, then plain strings).

    Parameters
    ----------
    pairs
        (label, target) pairs; labels that are neither integers nor printable-ASCII strings
        without quotes or backslashes are left to the other decoding paths.
    dtype
        dtype of the targets.
    """

    def __init__(self, pairs: list[tuple[object, float | int]], dtype: type[np.generic]) -> None:
        integers = [
            (label, target)
            for label, target in pairs
            if type(label) is int and abs(label) < MAX_LABEL_VALUE
        ]
        texts = [
            (label, target)
            for label, target in pairs
            if isinstance(label, str)
            and label.isascii()
            and label.isprintable()
            and '"' not in label
            and "\\" not in label
        ]
        self.int_labels = np.array([label for label, _ in integers], dtype=np.int64)
        encoded = [str(label).encode("ascii") for label, _ in texts]
        self.text_bytes = np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8)
        lengths = np.array([len(e) for e in encoded], dtype=np.int64)
        self.text_stops = np.cumsum(lengths)
        self.text_starts = self.text_stops - lengths
        self.targets = np.array([target for _, target in integers + texts], dtype=dtype)


def parse_dense(
    values: list[bytes],
    *,
    n_features: int,
    bias: bool,
    labels: LabelTable,
    max_id_length: int,
    max_abs: float,
) -> DenseParse:
    """Parse a batch of record values with the compiled parser (see the module docs).

    Raises ``TypeError`` when a value is not ``bytes`` (the caller then takes the slow road).
    """
    buffer = b"".join(values)
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    stops = np.cumsum(lengths)
    starts = stops - lengths
    count = len(values)
    X = np.empty((count, n_features + (1 if bias else 0)), dtype=np.float64)
    slots = np.empty(count, dtype=np.int64)
    id_starts = np.empty(count, dtype=np.int64)
    id_stops = np.empty(count, dtype=np.int64)
    high, low = powers_of_five()
    accepted = _parse_all(
        np.frombuffer(buffer, dtype=np.uint8),
        starts,
        stops,
        X,
        bias,
        n_features,
        max_id_length,
        max_abs,
        high,
        low,
        labels.int_labels,
        labels.text_bytes,
        labels.text_starts,
        labels.text_stops,
        DAYS_IN_MONTH,
        slots,
        id_starts,
        id_stops,
    )
    return DenseParse(
        X=X,
        slots=slots,
        id_starts=id_starts,
        id_stops=id_stops,
        buffer=buffer,
        accepted=int(accepted),
    )
