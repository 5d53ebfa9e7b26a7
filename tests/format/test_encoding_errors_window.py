"""An `EncodingError` in a long line shows a window of the line around the offending place, with
`...` where the line is cut and the caret under the offending character, so that an error in a
40 KB one-line text stays a few lines long."""

from __future__ import annotations

import pytest

import sparsetir_py as sp
from sparsetir_py.errors import EXCERPT_RADIUS

E = "#sparse_tensor.encoding<{ map = (i, j) -> (%s : dense, j : compressed) }>"


def _shown(message: str) -> tuple[str, str]:
    """The excerpt's source line and caret line, without their indent."""
    source, caret = message.splitlines()[-2:]
    assert source.startswith("    ") and caret.startswith("    ")
    return source[4:], caret[4:]


def _caret_at(message: str) -> str:
    """The text from the caret on, in the excerpt."""
    source, caret = _shown(message)
    assert caret.strip() == "^"
    return source[caret.index("^") :]


def test_error_in_a_40kb_line_shows_a_window():
    text = E % (" + ".join(["i"] * 5000) + " + k + " + " + ".join(["j"] * 5000))
    assert len(text) > 40_000
    with pytest.raises(sp.EncodingError) as info:
        sp.parse_encoding(text)
    err = info.value
    message = str(err)
    assert "unknown variable `k`" in message
    assert len(message) < 400, len(message)
    source, _ = _shown(message)
    assert source.startswith("...") and source.endswith("...")
    assert len(source) <= 2 * EXCERPT_RADIUS + 1 + 6
    assert _caret_at(message).startswith("k + j")
    assert err.position == text.index(" k ") + 1
    assert (err.line, err.column) == (1, err.position + 1)
    assert f"at position {err.position}" in message


@pytest.mark.parametrize("position", [0, 1, EXCERPT_RADIUS, EXCERPT_RADIUS + 1, 500, 999, 1000])
def test_window_edges(position):
    """No `...` on a side where the line is shown to its end; the caret always under the character
    (or just past the end of the line)."""
    text = "".join(chr(ord("a") + k % 26) for k in range(1000))
    message = str(sp.EncodingError("bad", text, position))
    source, caret = _shown(message)
    assert source.startswith("...") == (position > EXCERPT_RADIUS)
    assert source.endswith("...") == (position + EXCERPT_RADIUS + 1 < len(text))
    assert caret.index("^") == len(caret) - 1
    if position < len(text):
        assert source[caret.index("^")] == text[position]
    else:
        assert caret.index("^") == len(source)


def test_window_stays_within_the_line():
    """In a text of several lines, the window shows the offending line only."""
    text = "x" * 100 + "\n" + "short ? line\n" + "y" * 100
    err = sp.EncodingError("bad", text, text.index("?"))
    source, _ = _shown(str(err))
    assert source == "short ? line"
    assert _caret_at(str(err)).startswith("? line")
    assert (err.line, err.column) == (2, 7)


def test_control_characters_keep_the_caret_aligned():
    text = "a\tb\x00c\rd ? e"
    source, caret = _shown(str(sp.EncodingError("bad", text, text.index("?"))))
    assert len(source) == len(text) and source[caret.index("^")] == "?"


def test_short_line_is_shown_whole():
    text = "{ map = (i) -> (k : dense) }"
    with pytest.raises(sp.EncodingError) as info:
        sp.parse_encoding(text)
    source, _ = _shown(str(info.value))
    assert source == text


def test_position_outside_the_text_is_clamped():
    err = sp.EncodingError("bad", "abc", 99)
    assert err.position == 3 and (err.line, err.column) == (1, 4)
    assert sp.EncodingError("no text").position is None and str(sp.EncodingError("no text")) == "no text"


@pytest.mark.parametrize(
    "piece",
    [
        "(" + "x" * 40000 + " : dense, j : compressed)",  # an unknown variable
        "(i : " + "x" * 40000 + ", j : compressed)",  # an unknown level type
    ],
)
def test_a_long_name_is_cut_in_the_message(piece):
    text = "#sparse_tensor.encoding<{ map = (i, j) -> " + piece + " }>"
    with pytest.raises(sp.EncodingError) as info:
        sp.parse_encoding(text)
    assert len(str(info.value)) < 600
    assert "(40000 characters)" in str(info.value)


@pytest.mark.parametrize("zeros", [1, 30, 5000])
def test_leading_zeros_are_the_same_integer(zeros):
    """`int()` refuses literals past 4300 characters; leading zeros do not make a number large."""
    pos = sp.parse_encoding(
        "#sparse_tensor.encoding<{ map = (i, j) -> (i floordiv " + "0" * zeros + "2 : dense, j : compressed, "
        "i mod 2 : dense), posWidth = " + "0" * zeros + "32 }>"
    )
    assert pos == sp.parse_encoding(
        "#sparse_tensor.encoding<{ map = (i, j) -> (i floordiv 2 : dense, j : compressed, i mod 2 : dense), "
        "posWidth = 32 }>"
    )
