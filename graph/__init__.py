"""The EGG state machine: builder, routing, checkpointing, runner and CLI."""
