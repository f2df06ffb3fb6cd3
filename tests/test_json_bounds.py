"""JSON in a tool's output is read within bounds: a document with more values than
``MAX_VALUES`` is not built as objects (that costs ~200 bytes a value), its images are
found by the flat scan; the time to look is linear (each candidate line read at most once).
"""

from __future__ import annotations

import base64
import io
import json

from conftest import traced_peak
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from silica.results.json_images import MAX_VALUES, extract_json_images


def png() -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (7, 5), (0, 200, 0)).save(buf, format="PNG")
    return buf.getvalue()


def test_a_huge_document_is_scanned_flat_and_its_image_still_comes_out():
    data = base64.b64encode(png()).decode()
    items = ", ".join(f'{{"i": {i}}}' for i in range(MAX_VALUES))
    text = f'{{"image": {{"base64": "{data}"}}, "items": [{items}]}}\n'
    found, peak = traced_peak(lambda: extract_json_images(text))
    assert [p.data for p in found.images] == [png()]
    assert data not in found.text and '{"i": 0}, {"i": 1}' in found.text
    assert "holds too many values to read as a whole" in found.text
    assert peak < 3 * len(text) + 1_000_000, (peak, len(text))  # no object per value


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(['{"a": 1}', '{"a": [1, 2]}', "[{}]", '{"x": {"y": "z"}}', "{", ","]),
       st.sampled_from(["\n", ", ", ""]), st.integers(1, 120_000))
def test_many_values_cost_a_few_times_the_text(piece, sep, count):
    text = "{\n" + sep.join([piece] * count)
    found, peak = traced_peak(lambda: extract_json_images(text))
    assert found.text == text and not found.images
    # below MAX_VALUES a document may be built (~200 bytes a value); past it, never
    assert peak < 200 * min(text.count(","), MAX_VALUES) + 3 * len(text) + 1_000_000


def test_a_big_document_with_an_image_under_the_limit_is_read_whole():
    data = base64.b64encode(png()).decode()
    doc = {"base64": data, "rows": list(range(1000))}
    found = extract_json_images("log line\n" + json.dumps(doc) + "\nlast line")
    assert [p.data for p in found.images] == [png()] and "log line" in found.text
