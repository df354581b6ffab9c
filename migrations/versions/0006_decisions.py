"""decisions: the decision log and its outcomes; controllers.log_decisions, shadow_version

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("controllers") as batch:
        batch.add_column(
            sa.Column("log_decisions", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("shadow_version", sa.Integer(), nullable=True))
    op.create_table(
        "decisions",
        sa.Column("id", sa.String(length=26), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("tools", sa.JSON(), nullable=False),
        sa.Column("action", sa.String(length=256), nullable=True),
        sa.Column("scores", sa.JSON(), nullable=False),
        sa.Column("margin", sa.Float(), nullable=False),
        sa.Column("abstain", sa.Boolean(), nullable=False),
        sa.Column("shadow_version", sa.Integer(), nullable=True),
        sa.Column("shadow_action", sa.String(length=256), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("success", sa.Boolean(), nullable=True),
        sa.Column("reward", sa.Float(), nullable=True),
        sa.Column("notes", sa.String(length=500), nullable=True),
        sa.Column("outcome_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("decisions") as batch:
        batch.create_index("ix_decisions_name_id", ["name", "id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_index("ix_decisions_name_id")
    op.drop_table("decisions")
    with op.batch_alter_table("controllers") as batch:
        batch.drop_column("shadow_version")
        batch.drop_column("log_decisions")
