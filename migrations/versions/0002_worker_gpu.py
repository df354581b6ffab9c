"""workers: gpu_name, gpu_memory_bytes

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.add_column(sa.Column("gpu_name", sa.String(length=200), nullable=True))
        batch.add_column(sa.Column("gpu_memory_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("workers") as batch:
        batch.drop_column("gpu_memory_bytes")
        batch.drop_column("gpu_name")
