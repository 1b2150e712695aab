"""The root of the error hierarchy, apart from errors.py so that every module declaring errors (errors.py,
limit_errors.py, security_errors.py) imports it without importing each other: any of them may be imported first.
The table of errors and ``error_for`` are in errors.py, which imports the other two so every name registers."""

from __future__ import annotations

from typing import Any, ClassVar


class OdradekError(Exception):
    """Root of every error Odradek raises on purpose."""

    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    kafka_code: ClassVar[int] = -1
    error_code: ClassVar[int] = 50001
    http_status: ClassVar[int] = 500
    retriable: ClassVar[bool] = False

    _by_name: ClassVar[dict[str, type[OdradekError]]] = {}
    _by_error_code: ClassVar[dict[int, type[OdradekError]]] = {}

    def __init__(self, message: str = "", **details: Any) -> None:
        super().__init__(message or self.name)
        self.message = message or self.name
        self.details = details

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name in OdradekError._by_name:
            raise TypeError(f"error name {cls.name} is declared twice")
        OdradekError._by_name[cls.name] = cls
        # Several errors may share an HTTP envelope code (Confluent does this too); the first declared wins
        # when a client maps a bare code back to a class, and the name disambiguates when present.
        OdradekError._by_error_code.setdefault(cls.error_code, cls)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "error_code": self.error_code,
            "message": self.message,
            "error": self.name,
            "retriable": self.retriable,
        }
        body.update(self.details)
        return body
