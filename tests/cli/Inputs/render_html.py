"""Renders a `tessel ... --html` page headless with Debian's chromium and checks the picture.

    render_html.py PAGE.html OUT.png NUM_DEVICES

Takes a screenshot (chromium --headless --screenshot), decodes the PNG with the standard library
(zlib; 8-bit RGB or RGBA, non-interlaced, as chromium writes it) and checks that it is not blank
and that every device's colour (tools/html_view.cc DeviceColor: matplotlib's tab20 for devices
0..19) covers at least MIN_PIXELS pixels. The page must not reference anything outside itself.
Prints the colour count per device; exits 1 naming what is wrong.
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

TAB20 = ["1f77b4", "ff7f0e", "2ca02c", "d62728", "9467bd", "8c564b", "e377c2", "7f7f7f",
         "bcbd22", "17becf", "aec7e8", "ffbb78", "98df8a", "ff9896", "c5b0d5", "c49c94",
         "f7b6d2", "c7c7c7", "dbdb8d", "9edae5"]
MIN_PIXELS = 1000  # a mesh cell alone is 44 x 44 px; text anti-aliasing gives far fewer

page, png_path, num_devices = sys.argv[1], sys.argv[2], int(sys.argv[3])
html = open(page, encoding="utf-8").read()
if re.search(r"(src|href)\s*=\s*\"(https?:)?//", html) or "<script" in html or "@import" in html:
    sys.exit(f"{page}: not self-contained (an external reference or a script)")

chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if chromium is None:
    sys.exit("chromium not found: install Debian's chromium (scripts/setup.sh)")
with tempfile.TemporaryDirectory() as profile:
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", "--force-device-scale-factor=1",
                    f"--user-data-dir={profile}", "--window-size=1200,1600",
                    f"--screenshot={os.path.abspath(png_path)}",
                    "file://" + os.path.abspath(page)],
                   check=True, capture_output=True, timeout=120)


def decode_png(path):
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (2, 6) or interlace:
        sys.exit(f"{path}: unsupported PNG (depth {depth}, colour type {color})")
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev, pos = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = raw[pos], bytearray(raw[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


width, height, bpp, rows = decode_png(png_path)
counts = {}
for row in rows:
    for x in range(0, len(row), bpp):
        rgb = row[x:x + 3]
        counts[rgb] = counts.get(rgb, 0) + 1
background = max(counts.values())
if background == width * height:
    sys.exit(f"{png_path}: blank ({width}x{height}, one colour)")
problems = []
for device in range(min(num_devices, len(TAB20))):
    n = counts.get(bytes.fromhex(TAB20[device]), 0)
    print(f"device {device} #{TAB20[device]}: {'ok' if n >= MIN_PIXELS else n}")
    if n < MIN_PIXELS:
        problems.append(f"device {device}'s colour #{TAB20[device]} covers {n} pixels")
print(f"{width}x{height}, {len(counts)} colours")
if problems:
    sys.exit("\n".join(problems))
