"""Sessions: one row each, the conversation's JSON with its summary columns.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Times are UTC ISO 8601 text (to the microsecond), so text order is time order in
    # both backends; the document is text, not jsonb, so it comes back byte for byte.
    op.create_table(
        "sessions",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("document", sa.Text, nullable=False),
        sa.Column("version", sa.Text, nullable=False),
        sa.Column("created", sa.Text),
        sa.Column("updated", sa.Text, nullable=False),
        sa.Column("turns", sa.Integer, nullable=False, server_default="0"),
        sa.Column("messages", sa.Integer, nullable=False, server_default="0"),
        sa.Column("title", sa.Text, nullable=False, server_default=""),
        sa.Column("provider", sa.Text, nullable=False, server_default=""),
        sa.Column("model", sa.Text, nullable=False, server_default=""),
        sa.Column("replies", sa.Integer, nullable=False, server_default="0"),
    )
    op.create_index("sessions_by_updated", "sessions", ["updated"])


def downgrade() -> None:
    op.drop_index("sessions_by_updated", "sessions")
    op.drop_table("sessions")
