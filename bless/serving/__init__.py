"""The gRPC service (``server/``), its clients (``client/``) and the API they share (``api/``)."""
