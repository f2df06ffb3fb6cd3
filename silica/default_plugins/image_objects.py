"""Default plugin: a deleted session's images leave the object store too ([storage] images)."""

from silica.hookspecs import hookimpl


@hookimpl
def silica_session_deleted(session_id, home, settings) -> None:
    if settings.storage.images:  # the folder is removed by delete_session itself
        from silica.images.cached import CachedImageStore
        from silica.images.store import open_image_store

        store = open_image_store(home, session_id, settings)
        if isinstance(store, CachedImageStore):
            store.delete_objects()
