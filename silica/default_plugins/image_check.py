"""Default image preparation: sniff, decode fully, convert and fit to the given limits."""

from silica.hookspecs import hookimpl


@hookimpl(trylast=True)
def silica_prepare_image(payload, limits):
    from silica.images.check import prepare_image  # Pillow is imported only when needed

    return prepare_image(payload, limits)
