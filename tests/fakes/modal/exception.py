"""The `modal.exception` classes the provider and the fake raise (names and hierarchy as in modal 1.6)."""


class Error(Exception):
    pass


class AlreadyExistsError(Error):
    pass


class AuthError(Error):
    pass


class InvalidError(Error):
    pass


class NotFoundError(Error):
    pass


class RemoteError(Error):
    pass


class ImageBuildError(RemoteError):
    pass


class TimeoutError(Error):  # noqa: A001 - modal's own name
    pass


class ExecTimeoutError(TimeoutError):
    pass


class SandboxFilesystemError(Error):
    pass


class SandboxFilesystemNotFoundError(SandboxFilesystemError):
    pass
