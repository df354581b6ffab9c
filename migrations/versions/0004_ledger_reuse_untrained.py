"""ledger_entries: untrained_score, untrained_like, reused_from (a candidate that scores like the
untrained model; a candidate that reused a finished one's result)

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("ledger_entries") as batch:
        batch.add_column(sa.Column("untrained_score", sa.Float(), nullable=True))
        batch.add_column(sa.Column("untrained_like", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("reused_from", sa.String(length=26), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger_entries") as batch:
        batch.drop_column("reused_from")
        batch.drop_column("untrained_like")
        batch.drop_column("untrained_score")
