"""Alembic's environment for silica's session store: migrations run on the connection
``silica.storage.schema.migrate`` hands over (``config.attributes["connection"]``)."""

from alembic import context

context.configure(connection=context.config.attributes["connection"], target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
