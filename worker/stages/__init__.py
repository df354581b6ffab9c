"""Stage functions, one module per kind or concern: `(context, spec) -> dict`."""
