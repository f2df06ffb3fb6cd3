"""Default result processor: images in the tool's JSON output."""

from silica.hookspecs import hookimpl

JSON_ORDER = 200


def process(draft) -> None:
    from silica.results.json_images import extract_json_images  # not needed to list tools

    found = extract_json_images(draft.text)
    draft.text = found.text
    draft.images.extend(found.images)


@hookimpl
def silica_result_processors(register) -> None:
    register("json-images", JSON_ORDER, process)
