"""``--inspect [HOST:]PORT``: only ASCII digits make a port (``str.isdigit`` also takes '²')."""

from __future__ import annotations

import pytest

from sskv_mapping.emulator.process import build_parser


@pytest.mark.parametrize("text", ["²", "8²", "٣", "[::1]:²", "65536", "000000080", "x"])
def test_a_port_that_is_not_ascii_digits_is_a_usage_error(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--inspect", text])
    assert exit_info.value.code == 2
    assert "not a TCP port" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "address"), [("0", ("127.0.0.1", 0)), ("8080", ("127.0.0.1", 8080)), ("[::1]:80", ("::1", 80))]
)
def test_a_port_of_ascii_digits_is_taken(text: str, address: tuple[str, int]) -> None:
    assert build_parser().parse_args(["--inspect", text]).inspect == address
