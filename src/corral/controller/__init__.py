"""The controller daemon: REST API, store, and the scheduling loop around the engine."""
