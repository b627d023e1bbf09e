"""``files/zips.py``: a ``.keras`` zip read through its guards (bounded directory, Keras's own member
names, no bomb, nothing extracted); each hostile archive is refused in one line naming the file."""

from __future__ import annotations

import zipfile

import pytest

from conftest import FIXTURES
from gruconv.errors import InputError
from gruconv.files import zips

K3 = FIXTURES / "keras3"


def _zip(path, members, compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as z:
        for name, data in members:
            z.writestr(name, data)
    return path


def _good_config():
    return zipfile.ZipFile(K3 / "eligible.keras").read("config.json")


@pytest.mark.parametrize("case", ["traversal", "absolute", "backslash", "unknown", "too_many", "no_config",
                                  "bomb", "big_config", "not_json", "deep_json", "dup"])
def test_hostile_keras_zip_is_refused_with_one_line(tmp_path, case):
    cfg = _good_config()
    members = {
        "traversal": [("config.json", cfg), ("../evil.py", b"x")],
        "absolute": [("config.json", cfg), ("/etc/evil", b"x")],
        "backslash": [("config.json", cfg), ("assets\\..\\x", b"x")],
        "unknown": [("config.json", cfg), ("payload.pkl", b"x")],
        "too_many": [("config.json", cfg)] + [(f"assets/{i}", b"") for i in range(zips.MAX_ZIP_MEMBERS)],
        "no_config": [("metadata.json", b"{}")],
        "bomb": [("config.json", b'{"a": "' + b" " * (8 * 2**20) + b'"}')],
        "big_config": [("config.json", b" " * (zips.MAX_CONFIG_BYTES + 10) + b"{}")],
        "not_json": [("config.json", b"\x80\x81 nope")],
        "deep_json": [("config.json", b"[" * 5000 + b"]" * 5000)],
        "dup": [("config.json", cfg), ("config.json", cfg)],
    }[case]
    p = tmp_path / "x.keras"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns on the duplicate name it is asked to write
        comp = zipfile.ZIP_STORED if case in ("big_config", "deep_json") else zipfile.ZIP_DEFLATED
        _zip(p, members, comp)
    with pytest.raises(InputError) as ei:
        zips.read_keras_zip(p)
    msg = str(ei.value)
    assert "\n" not in msg and str(p) in msg
    want = {"bomb": "zip bomb", "too_many": "members", "dup": "twice", "no_config": "no config.json",
            "big_config": "declares", "deep_json": "nest", "not_json": "UTF-8"}.get(case, "not one Keras writes")
    assert want in msg, msg


def test_zip_member_inflating_past_its_declared_size_is_refused(tmp_path):
    """A member whose local data inflates to more than the central directory declares."""
    p = _zip(tmp_path / "x.keras", [("config.json", b'{"class_name": "Sequential", "config": {"layers": []}}'
                                     + b" " * 400)])
    raw = bytearray(p.read_bytes())
    cd = raw.rfind(b"PK\x01\x02")
    size_at = cd + 24  # central directory: uncompressed size
    declared = int.from_bytes(raw[size_at:size_at + 4], "little")
    raw[size_at:size_at + 4] = (declared - 300).to_bytes(4, "little")
    p.write_bytes(bytes(raw))
    with pytest.raises(InputError, match="refused|cannot be read"):
        zips.read_keras_zip(p)
