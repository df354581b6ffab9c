"""controllers and controller_versions: promoted controllers, their versions, the live one

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "controller_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.String(length=26), nullable=False),
        sa.Column("source_run_id", sa.String(length=26), nullable=False),
        sa.Column("candidate_id", sa.String(length=64), nullable=True),
        sa.Column("trainer", sa.String(length=16), nullable=False),
        sa.Column("trainer_dir", sa.String(length=300), nullable=False),
        sa.Column("features_format", sa.String(length=64), nullable=True),
        sa.Column("anchor_score", sa.Float(), nullable=True),
        sa.Column("scores", sa.JSON(), nullable=True),
        sa.Column("anchors", sa.String(), nullable=True),
        sa.Column("abstain_margin", sa.Float(), nullable=True),
        sa.Column("promoted_by", sa.String(length=200), nullable=False),
        sa.Column("promoted_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name", "version"),
    )
    with op.batch_alter_table("controller_versions") as batch:
        batch.create_index("ix_controller_versions_name", ["name"], unique=False)
    op.create_table(
        "controllers",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("live_version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("controllers")
    with op.batch_alter_table("controller_versions") as batch:
        batch.drop_index("ix_controller_versions_name")
    op.drop_table("controller_versions")
