"""The term encoding both engines share (kindex.adapters.filter_terms) and the embedded compiler's range regex:
the number terms sort as the numbers do, and the regex of a hex range holds exactly the strings in it."""

from __future__ import annotations

import itertools
import random
import re
import struct

import pytest

from kindex.adapters.filter_terms import attribute_terms, next_sortable, previous_sortable, sortable_number
from kindex.adapters.local.search.filters import hex_range_regex

pytestmark = pytest.mark.unit


def test_number_terms_sort_as_the_numbers_do():
    # Given numbers of every sign and size, ints and floats, the extremes and signed zeros
    rng = random.Random(5)
    numbers = [
        0,
        -0.0,
        0.0,
        1,
        -1,
        2**53 - 1,
        -(2**53 - 1),
        5e-324,
        -5e-324,
        1.7976931348623157e308,
        -1.7976931348623157e308,
        0.1,
        2020,
        2020.0,
        2020.5,
    ]
    numbers += [struct.unpack(">d", struct.pack(">Q", rng.getrandbits(64)))[0] for _ in range(2000)]
    numbers = [n for n in numbers if n == n and abs(n) != float("inf")]
    # When encoded
    # Then byte order of the terms is numeric order, and equal numbers share one term
    for a, b in itertools.pairwise(sorted(numbers)):
        assert (sortable_number(a) < sortable_number(b)) == (a < b)
        assert (sortable_number(a) == sortable_number(b)) == (a == b)
    assert sortable_number(2020) == sortable_number(2020.0) and sortable_number(-0.0) == sortable_number(0)
    assert all(len(sortable_number(n)) == 16 for n in numbers)


def test_the_neighbours_of_an_encoding_are_one_step_away():
    assert next_sortable(sortable_number(1.0)) == sortable_number(1.0000000000000002)
    assert previous_sortable(sortable_number(1.0)) == sortable_number(0.9999999999999999)
    assert next_sortable("f" * 16) is None and previous_sortable("0" * 16) is None


def test_attribute_terms_are_typed_and_lists_also_count_as_strings():
    terms = attribute_terms({"year": 2020, "region": "eu", "tags": ["x", "x", "y"], "public": False})
    assert terms["attr_k"] == ["year", "region", "tags", "public"]
    assert terms["attr_n"] == [f"year\x1f{sortable_number(2020)}"]
    assert terms["attr_s"] == ["region\x1feu", "tags\x1fx", "tags\x1fy"]
    assert terms["attr_l"] == ["tags\x1fx", "tags\x1fy"]
    assert terms["attr_b"] == ["public\x1ffalse"]
    assert attribute_terms(None) == {"attr_k": [], "attr_s": [], "attr_l": [], "attr_n": [], "attr_b": []}


@pytest.mark.slow
def test_a_hex_range_regex_holds_exactly_the_strings_in_the_range():
    # Given every pair of bounds over three hex digits (a sample) and the full 16-digit extremes
    every = [f"{i:03x}" for i in range(16**3)]
    rng = random.Random(9)
    for low, high in [("000", "fff"), ("000", "000"), ("fff", "fff"), ("0ff", "100")] + [
        tuple(sorted(rng.sample(every, 2))) for _ in range(300)
    ]:
        pattern = re.compile(hex_range_regex(low, high))
        # Then a string matches exactly when it lies within the bounds
        assert [s for s in every if pattern.fullmatch(s)] == [s for s in every if low <= s <= high], (low, high)
    assert len(hex_range_regex(sortable_number(-1e300), sortable_number(1e300))) < 1500
