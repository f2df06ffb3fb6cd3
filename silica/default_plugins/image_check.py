"""Default image preparation: sniff, decode fully, convert and fit to the default limits.

Images are prepared once, when a tool's result is built, against ``ANTHROPIC`` limits (the
strictest on bytes among the vision providers); a provider with other limits fits them again
when it builds its request.
"""

from silica.hookspecs import hookimpl


@hookimpl(trylast=True)
def silica_prepare_image(payload):
    from silica.images.check import prepare_image  # Pillow is imported only when needed

    return prepare_image(payload)
