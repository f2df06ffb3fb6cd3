"""Default result processor: images in the tool's JSON output."""

from silica.hookspecs import hookimpl
from silica.results.json_images import extract_json_images

JSON_ORDER = 200


def process(draft) -> None:
    draft.text, images = extract_json_images(draft.text)
    draft.images.extend(images)


@hookimpl
def silica_result_processors(register) -> None:
    register("json-images", JSON_ORDER, process)
