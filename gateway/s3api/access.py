"""Authorization: may this user do this action on this bucket and key? Decided before any cache."""

from __future__ import annotations

from gateway.config import AuthSettings, Grant, User
from gateway.errors import S3Error
from gateway.s3api.routes import Action


class AccessPolicy:
    """The configured users and their grants. Pure lookups; safe to share."""

    def __init__(self, settings: AuthSettings) -> None:
        self._users = {u.access_key: u for u in settings.users}
        self._anonymous = frozenset(settings.anonymous_read)
        self._named = self._anonymous | {g.bucket for u in settings.users for g in u.grants if g.bucket != "*"}
        self._any_bucket = any(u.admin or any(g.bucket == "*" for g in u.grants) for u in settings.users)

    def user(self, access_key: str) -> User | None:
        return self._users.get(access_key)

    def secret_for(self, access_key: str) -> str | None:
        user = self._users.get(access_key)
        return user.secret_key if user else None

    def allows(self, user: User | None, action: Action, bucket: str | None, key: str | None = None) -> bool:
        """`key` is the object key for read/write and the listing prefix for list."""
        if action == "none":
            return user is not None
        if user is None:
            return action in ("read", "list") and bucket in self._anonymous
        if user.admin:
            return True
        if action == "bucket-admin" or bucket is None:
            return False
        for grant in user.grants:
            if _grant_allows(grant, action, bucket, key):
                return True
        return False

    def check(self, user: User | None, action: Action, bucket: str | None, key: str | None = None) -> None:
        if not self.allows(user, action, bucket, key):
            raise S3Error("AccessDenied", resource=_resource(bucket, key))

    def grants_inside(self, user: User | None, bucket: str, prefix: str) -> list[str]:
        """The prefixes of the user's grants on `bucket` that lie strictly inside `prefix`:
        what a listing of `prefix` may show when no grant covers all of it."""
        if user is None or user.admin:
            return []
        return sorted({g.prefix for g in user.grants
                       if g.bucket in ("*", bucket) and g.prefix.startswith(prefix) and g.prefix != prefix})

    def serves(self, bucket: str) -> bool | None:
        """Whether some request could be allowed on `bucket`: True when a grant or
        auth.anonymous_read names it, False when no user may reach it, None when only an admin
        or a `*` grant reaches it (then it is served if it exists)."""
        if bucket in self._named:
            return True
        return None if self._any_bucket else False

    def may_see_bucket(self, user: User | None, bucket: str) -> bool:
        """ListBuckets shows only the buckets a user holds some grant on."""
        if user is None:
            return False
        return user.admin or any(g.bucket in ("*", bucket) for g in user.grants)


def _grant_allows(grant: Grant, action: Action, bucket: str, key: str | None) -> bool:
    if grant.bucket not in ("*", bucket):
        return False
    if action in ("write", "bucket-write") and grant.access != "readwrite":
        return False
    if action == "bucket-write":
        return grant.prefix == ""
    if action == "list" and key is None:
        return True  # bucket-level reads (HeadBucket, location): any grant on the bucket
    return (key or "").startswith(grant.prefix)


def _resource(bucket: str | None, key: str | None) -> str:
    return "/" + "/".join(p for p in (bucket, key) if p)
