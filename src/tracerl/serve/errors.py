"""OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}` with the matching HTTP status.

Every bad request gets one sentence naming the problem and the fix. An error never touches what an
episode has already recorded: the checks run before anything is written.
"""

from __future__ import annotations


class APIError(Exception):
    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param=param, code=code)


def not_found(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(404, message, param=param, code=code)


def conflict(message: str, *, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(409, message, param=param, code=code)


def validation_message(errors: list[dict]) -> tuple[str, str | None]:
    """One sentence (and the offending parameter) from pydantic's validation errors."""
    first = errors[0] if errors else {"loc": (), "msg": "the request body is not valid"}
    loc = [str(x) for x in first.get("loc", ()) if x not in ("body",)]
    param = ".".join(loc) or None
    where = f"'{param}'" if param else "the request body"
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")  # a schema check's own sentence
    return f"{where}: {msg}{more}; fix it and send the request again", param
