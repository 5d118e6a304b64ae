"""The dashboard guide's screenshots (docs/images/dashboard-*.png), taken from the site the
browser tests use (tests/web_site.py), so the pictures show what the tests check.

    .venv/bin/python docs/screenshots.py [--dsn postgresql://postgres@127.0.0.1:5432/test]

It needs the database (the schema it fills is dropped afterwards) and Debian's Chromium at
/usr/bin/chromium. Each page is taken at 1280x800 and stored with a palette of at most 256
colours (written here: no image library), which keeps each file small.
"""

from __future__ import annotations

import argparse
import base64
import struct
import sys
import time
import zlib
from collections import Counter
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

from sweepq.sweeps.naming import leaf_group

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from web_site import Site, chromium, signed_in  # noqa: E402  (tests/ is put on the path above)

IMAGES = ROOT / "docs" / "images"
WIDTH, HEIGHT = 1280, 800
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def pages(site: Site) -> dict[str, str]:
    """Each picture's name, and the page it shows."""
    made = site.made
    return {
        "overview": "/",
        "jobs": "/jobs?state=failed",
        "job": f"/jobs/{made.failed[0]}",
        "bulk": "/jobs/retry?state=failed&queue=default",
        "sweeps": "/sweeps",
        "sweep": f"/sweeps/{made.run}",
        "keys": "/keys",
        "cron": "/cron",
        "queues": "/queues",
    }


def wait_for_figures(site: Site, *, timeout: float = 90.0) -> None:
    """Until the cron's quick schedule has ticked and the sweep is a fifth of the way."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ticked = site.execute("SELECT count(*) FROM {schema}.cron_schedules WHERE last_job_id > 0")
        done = site.execute(
            "SELECT count(*) FROM {schema}.jobs WHERE job_group = %s AND state = 'completed'",
            leaf_group(site.made.run),
        )
        if ticked[0][0] and done[0][0] >= site.items // 5:
            return
        time.sleep(0.5)
    raise TimeoutError("the site's cron and sweep did not move in time")


def pixels(page: Page, png: bytes) -> bytes:
    """The RGBA pixels of a PNG, decoded by the browser."""
    encoded: str = page.evaluate(
        """async (data) => {
            const image = new Image();
            image.src = "data:image/png;base64," + data;
            await image.decode();
            const canvas = document.createElement("canvas");
            canvas.width = image.width;
            canvas.height = image.height;
            const context = canvas.getContext("2d");
            context.drawImage(image, 0, 0);
            const rgba = context.getImageData(0, 0, image.width, image.height).data;
            let text = "";
            for (let i = 0; i < rgba.length; i += 0x8000) {
                text += String.fromCharCode.apply(null, rgba.subarray(i, i + 0x8000));
            }
            return btoa(text);
        }""",
        base64.b64encode(png).decode(),
    )
    return base64.b64decode(encoded)


def palette_png(rgba: bytes, width: int, height: int) -> bytes:
    """An 8-bit palette PNG of the pixels: the 256 commonest colours, every other one drawn in
    the nearest of them (a page is mostly flat colours and the grey ramps of its text)."""
    colours = [rgba[i : i + 3] for i in range(0, len(rgba), 4)]
    counts = Counter(colours)
    palette = [colour for colour, _ in counts.most_common(256)]
    index = {colour: i for i, colour in enumerate(palette)}
    for colour in counts:
        if colour not in index:
            index[colour] = min(
                range(len(palette)),
                key=lambda i: sum((a - b) ** 2 for a, b in zip(colour, palette[i], strict=True)),
            )
    raw = bytearray()
    for y in range(height):
        raw.append(0)  # no filter: palette indexes compress well as they are
        raw.extend(index[c] for c in colours[y * width : (y + 1) * width])

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)
    return b"".join(
        [
            b"\x89PNG\r\n\x1a\n",
            chunk(b"IHDR", header),
            chunk(b"PLTE", b"".join(palette)),
            chunk(b"IDAT", zlib.compress(bytes(raw), 9)),
            chunk(b"IEND", b""),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    IMAGES.mkdir(parents=True, exist_ok=True)
    # A slower sweep than the tests' (4 slots, 0.5 s an item): its minute stands beside the
    # hour's history on the chart instead of dwarfing it.
    # The schema of a default install, so the pages show what yours will (it must not exist).
    site = Site(args.dsn, items=1500, delay=0.5, schema="sweepq")
    with site, sync_playwright() as playwright:
        browser = chromium(playwright)
        login = browser.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        login.goto(f"{site.url}/login")
        shots = {"login": login.screenshot()}
        wait_for_figures(site)
        context = signed_in(browser, site, name="ada")
        for name, path in pages(site).items():
            page = context.new_page()
            page.goto(f"{site.url}{path}")
            shots[name] = page.screenshot()
            page.close()
        decoder = browser.new_page()
        for name, png in shots.items():
            image = palette_png(pixels(decoder, png), WIDTH, HEIGHT)
            target = IMAGES / f"dashboard-{name}.png"
            target.write_bytes(image)
            print(f"{target.relative_to(ROOT)}: {len(image) // 1024} kB")
        browser.close()


if __name__ == "__main__":
    main()
