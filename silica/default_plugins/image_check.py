"""Default image preparation: sniff the bytes and keep only formats models accept."""

from silica.blocks import ImageBlock, TextBlock
from silica.hookspecs import hookimpl
from silica.images.sniff import SENDABLE, sniff_media_type


@hookimpl
def silica_prepare_image(payload):
    actual = sniff_media_type(payload.data)
    if actual not in SENDABLE:
        what = actual or "data of no known image format"
        return TextBlock(text=f"[image dropped: {what} cannot be sent to the model]")
    return ImageBlock(media_type=actual, data=payload.data, source=payload.source)
