# SPDX-License-Identifier: Apache-2.0
"""lastcall's JSON string quoting against Python's json module (issue 19.17).

The report, the JSON log format and the status and ledger listings quote strings with
core/json's json_quote. Tens of thousands of byte strings (seeded: UTF-8 text of every plane,
control characters, quotes and backslashes, and the ill-formed sequences of Unicode's table 3-7:
overlong forms, surrogates, code points above U+10FFFF, truncated sequences, stray continuation
bytes) go through tests/tools/json_quote; each output must parse with json.loads and equal
Python's own bytes.decode("utf-8", "replace") of the input: well-formed text unchanged, each
maximal ill-formed subpart one U+FFFD.
"""
import json
import os
import random
import subprocess
import unittest

from lctest import build_tool

SEED = 20261203
CASES = 20000


def tool_path():
    return build_tool("json_quote")


TRICKY = [b"\xc0\xaf", b"\xe0\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80",
          b"\xf5\x80", b"\xff", b"\x80", b"\xbf\xbf", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc2",
          b'"', b"\\", b"\x00", b"\x1f", b"\x7f", b"\n\r\t", b"/", "déjà".encode(),
          "日本語".encode(), "😀".encode(), "\u2028\u2029".encode()]


def random_case(rng):
    parts = []
    for _ in range(rng.randint(0, 8)):
        kind = rng.random()
        if kind < 0.3:
            parts.append(rng.choice(TRICKY))
        elif kind < 0.6:
            cp = rng.choice([rng.randint(0x20, 0x7e), rng.randint(0x80, 0x7ff),
                             rng.randint(0x800, 0xffff), rng.randint(0x10000, 0x10ffff)])
            if 0xd800 <= cp <= 0xdfff:
                cp = 0xfffd
            parts.append(chr(cp).encode())
        else:
            parts.append(bytes(rng.randint(0, 255) for _ in range(rng.randint(1, 4))))
    return b"".join(parts)


class JsonQuoteDifferential(unittest.TestCase):
    def test_every_string_is_valid_json_and_decodes_as_python_decodes_utf8(self):
        rng = random.Random(SEED)
        cases = [t for t in TRICKY] + [random_case(rng) for _ in range(CASES)]
        stdin = "".join(c.hex() + "\n" for c in cases)
        out = subprocess.run([tool_path()], input=stdin, capture_output=True, text=True,
                             check=True, timeout=120).stdout.split("\n")[:-1]
        self.assertEqual(len(out), len(cases))
        for data, quoted in zip(cases, out):
            expected = data.decode("utf-8", "replace")
            self.assertEqual(json.loads(quoted), expected, f"input {data!r} gave {quoted}")

    def test_utf8_text_is_written_as_it_is_not_byte_wise_escapes(self):
        out = subprocess.run([tool_path()], input="déjà".encode().hex() + "\n",
                             capture_output=True, text=True, check=True, timeout=30).stdout
        self.assertEqual(out.strip(), '"déjà"')


if __name__ == "__main__":
    unittest.main()
