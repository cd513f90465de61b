"""The ``cog-pl`` command: one module per command group, each with a ``register(subparsers)`` function."""
