"""Errors the services answer with (each maps to one gRPC status code), and the one the
server refuses to start with."""

from __future__ import annotations

import grpc


class ServiceError(Exception):
    """A request the server refuses or could not serve; the message says why and what to do."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        """Seconds after which a retry may succeed (sent as gRPC's ``grpc-retry-pushback-ms``
        trailing metadata, gRFC A6), or None: retrying the same request will not help."""

    @property
    def reason(self) -> str:
        """Why, as the ``reason`` label of the request counters: the status code's name in
        lower case (``invalid_argument``), unless a subclass says more."""
        return self.code.name.lower()


class InvalidArgument(ServiceError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(ServiceError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ServiceError):
    code = grpc.StatusCode.ALREADY_EXISTS


class FailedPrecondition(ServiceError):
    """Admission refused (quota, memory, kernel granularity) or the backend cannot do it."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(ServiceError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(ServiceError):
    code = grpc.StatusCode.UNAVAILABLE


class Aborted(ServiceError):
    code = grpc.StatusCode.ABORTED


class Unauthenticated(ServiceError):
    code = grpc.StatusCode.UNAUTHENTICATED


class KernelFault(ServiceError):
    """A kernel of the request faulted on the GPU (only this request failed)."""

    code = grpc.StatusCode.INTERNAL
    reason = "kernel_fault"


class Cancelled(ServiceError):
    """The client cancelled the request (it never sees this answer)."""

    code = grpc.StatusCode.CANCELLED


class DeadlineExceeded(ServiceError):
    """The client's deadline passed before the request was answered."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unimplemented(ServiceError):
    """A protocol call that does not apply to bless (the message says why and what to use instead)."""

    code = grpc.StatusCode.UNIMPLEMENTED


class StartupError(Exception):
    """The server cannot start as configured (state directory taken, port in use, a
    secret file others can read); one line that says why and which setting to change."""
