"""One exception tree for everything Mnemos refuses; the API renders it as one JSON shape.

Each error carries the HTTP status and the machine-readable `code` of docs/design.md, so the
domain can say *why* without knowing about HTTP, and one handler renders every error as
`{"error": {"code", "message", "request_id", "details"?}}`.
"""

from __future__ import annotations

from typing import Any


class MnemosError(Exception):
    """Base of every error Mnemos reports to a caller."""

    status: int = 500
    code: str = "internal_error"
    default_message: str = "Internal server error"

    def __init__(self, message: str | None = None, details: dict[str, Any] | None = None):
        self.message = message or self.default_message
        self.details = details
        super().__init__(self.message)


class Unauthorized(MnemosError):
    status, code, default_message = 401, "unauthorized", "Missing or invalid credentials"


class Forbidden(MnemosError):
    status, code, default_message = 403, "forbidden", "You may not do this"


class SessionExpired(Unauthorized):
    """A web page session (`/ui/`) past its lifetime, or ended by a token revocation or a key
    rotation."""

    code, default_message = "session_expired", "Your session has expired; sign in again"


class CsrfRefused(Forbidden):
    """A state-changing web page request without its session's CSRF token."""

    code = "csrf_refused"
    default_message = "This form is not from your session (missing or wrong CSRF token)"


class PlanRequired(MnemosError):
    status, code = 403, "plan_required"
    default_message = (
        "Memory API access requires an Enterprise plan. "
        "Please upgrade your subscription to use this endpoint."
    )


class NotFound(MnemosError):
    status, code, default_message = 404, "not_found", "Not found"


class MethodNotAllowed(MnemosError):
    status, code, default_message = 405, "method_not_allowed", "Method not allowed"


class PayloadTooLarge(MnemosError):
    status, code, default_message = 413, "payload_too_large", "Request body is too large"


class ValidationFailed(MnemosError):
    status, code, default_message = 422, "validation_failed", "Validation failed"


class InvalidMemoryType(MnemosError):
    status, code, default_message = 422, "invalid_memory_type", "Type is not valid for system"


class SubjectIdRequired(MnemosError):
    status, code, default_message = 422, "subject_id_required", "subject_id is required"


class SubjectIdRequiresSubjectScope(MnemosError):
    status, code = 422, "subject_id_requires_subject_scope"
    default_message = "subject_id is only allowed with scope 'subject'"


class OrgScopeRequiresOrganization(MnemosError):
    status, code = 422, "org_scope_requires_organization"
    default_message = "Organization scope requires the agent's owner to belong to an organization"


class InvalidPagination(MnemosError):
    status, code, default_message = 422, "invalid_pagination", "Invalid pagination parameters"


class MemoryNotArchived(MnemosError):
    status, code, default_message = (
        422,
        "memory_not_archived",
        "Only an archived memory can be restored",
    )


class Conflict(MnemosError):
    status, code, default_message = 409, "conflict", "Conflict"


class AgentLimitReached(MnemosError):
    status, code, default_message = 409, "agent_limit_reached", "Too many agents for one person"


class RateLimited(MnemosError):
    """Too many requests (or failed authentications); retry after `retry_after` seconds."""

    status, code, default_message = 429, "rate_limited", "Too many requests; retry later"

    def __init__(self, retry_after: int, message: str | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class TenantBusy(RateLimited):
    """The caller's tenant already has its share of this process's requests in flight
    (`MNEMOS_MAX_IN_FLIGHT_PER_TENANT`): refused at once rather than queued behind them."""

    code = "tenant_busy"
    default_message = "Too many of your organization's requests are in flight; retry shortly"

    def __init__(self, message: str | None = None):
        super().__init__(1, message)


class InsufficientStorage(MnemosError):
    status, code, default_message = 507, "insufficient_storage", "The database has no room to write"


class SearchTooExpensive(MnemosError):
    """A search that ran past its time budget (`MNEMOS_SEARCH_BUDGET_MS`) and was stopped."""

    status, code = 422, "search_too_expensive"
    default_message = (
        "The search took too long and was stopped: use fewer, longer or rarer words, "
        "or narrow it with memory_scope or filters"
    )


class SemanticSearchDisabled(MnemosError):
    """A search by meaning on a server with no embedder (`MNEMOS_EMBEDDER=none`)."""

    status, code = 422, "semantic_search_disabled"
    default_message = (
        "This server has no embedder (MNEMOS_EMBEDDER=none): use mode=keyword or mode=hybrid"
    )


# What to install for MCP, said the same way by `/mcp` and `mnemos mcp`: the SDK itself (the
# `mnemos` on PyPI is another project, so `mnemos[mcp]` is right only for an installed checkout).
MCP_INSTALL = (
    "pip install 'mcp>=2.3,<3' into Mnemos's environment (from a checkout: pip install '.[mcp]')"
)


class McpNotInstalled(MnemosError):
    """`/mcp` on a server installed without the `mcp` extra."""

    status, code = 501, "mcp_not_installed"
    default_message = f"This server has no MCP support: {MCP_INSTALL}, and restart it"


class CannotWrite(MnemosError):
    """A command's output file cannot be written (a missing directory, no permission)."""

    status, code, default_message = 500, "cannot_write", "The output file cannot be written"


class DatabaseMissing(MnemosError):
    """An operator's command named a database that does not exist (a mistyped SQLite path):
    only `serve`, `migrate`, `import`, `admin create-org` and `admin create-user` create one."""

    status, code, default_message = 404, "database_missing", "No database at that address"


class SystemRefused(MnemosError):
    """The operating system refused what an operator's command needed: a directory that cannot
    be made, a file that cannot be read, an address already in use."""

    status, code = 500, "system_refused"
    default_message = "The operating system refused what the command needed"


class StorageUnavailable(MnemosError):
    status, code, default_message = 503, "storage_unavailable", "The database is unavailable"


class EmbedderUnavailable(MnemosError):
    """The embedder could not turn texts into vectors (`MNEMOS_EMBEDDER`): its endpoint failed
    or answered something unusable, or the local model could not be loaded."""

    status, code, default_message = 503, "embedder_unavailable", "The embedder is unavailable"


class EmbedderRefused(EmbedderUnavailable):
    """The embedder refused the texts themselves (an endpoint's HTTP 400, 413 or 422: a text
    past the model's context), not for want of a service: another text may well pass. The
    embedding worker sets such a memory aside rather than fail its whole batch (review22)."""


class SchemaNewer(MnemosError):
    """The database was migrated by a newer Mnemos: its schema revision is unknown to this one,
    which neither migrates nor serves it (docs/deploying.md, "Upgrades")."""

    status, code = 409, "schema_newer"


class OtherModelIndexed(MnemosError):
    """`mnemos reindex` under an embedder other than the one whose vectors the database holds
    (the server's): it would replace them with vectors the server never reads."""

    status, code = 409, "other_model_indexed"


def invalid_field(field: str, problem: str) -> ValidationFailed:
    """A `validation_failed` error that names the offending field."""
    return ValidationFailed(f"Invalid value for {field}: {problem}", details={field: problem})
