"""The one error type for S3 errors, and S3's table of codes."""

from __future__ import annotations

# code -> (HTTP status, default message), as S3 documents them.
S3_ERRORS: dict[str, tuple[int, str]] = {
    "AccessDenied": (403, "Access Denied"),
    "AccessForbidden": (403, "CORSResponse: This CORS request is not allowed."),
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed."),
    "AuthorizationQueryParametersError": (400, "Query-string authentication parameters are malformed."),
    "BadRequest": (400, "Bad Request"),
    "BadDigest": (400, "The Content-MD5 or checksum value that you specified did not match what the server received."),
    "BucketAlreadyExists": (409, "The requested bucket name is not available."),
    "BucketAlreadyOwnedByYou": (409, "Your previous request to create the named bucket succeeded and you already own it."),
    "BucketNotEmpty": (409, "The bucket you tried to delete is not empty"),
    "EntityTooLarge": (400, "Your proposed upload exceeds the maximum allowed object size."),
    "EntityTooSmall": (400, "Your proposed upload is smaller than the minimum allowed object size."),
    "ExpiredToken": (400, "The provided token has expired."),
    "IncompleteBody": (400, "You did not provide the number of bytes specified by the Content-Length HTTP header."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
    "InvalidAccessKeyId": (403, "The AWS Access Key Id you provided does not exist in our records."),
    "InvalidArgument": (400, "Invalid Argument"),
    "InvalidBucketName": (400, "The specified bucket is not valid."),
    "InvalidDigest": (400, "The Content-MD5 you specified is not valid."),
    "InvalidTag": (400, "The tag provided was not a valid tag."),
    "InvalidPart": (400, "One or more of the specified parts could not be found."),
    "InvalidPartOrder": (400, "The list of parts was not in ascending order."),
    "InvalidRange": (416, "The requested range is not satisfiable"),
    "InvalidRequest": (400, "Invalid Request"),
    "InvalidURI": (400, "Couldn't parse the specified URI."),
    "KeyTooLongError": (400, "Your key is too long"),
    "MalformedPOSTRequest": (400, "The body of your POST request is not well-formed multipart/form-data."),
    "MaxPostPreDataLengthExceeded": (400, "Your POST request fields preceding the upload file were too large."),
    "IncorrectNumberOfFilesInPostRequest": (400, "POST requires exactly one file upload per request."),
    "InvalidPolicyDocument": (400, "The content of the form does not meet the conditions specified in the policy document."),
    "MalformedXML": (400, "The XML you provided was not well-formed or did not validate against our published schema."),
    "MetadataTooLarge": (400, "Your metadata headers exceed the maximum allowed metadata size."),
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "MissingContentLength": (411, "You must provide the Content-Length HTTP header."),
    "MissingSecurityHeader": (400, "Your request is missing a required header."),
    "NoSuchBucket": (404, "The specified bucket does not exist"),
    "NoSuchKey": (404, "The specified key does not exist."),
    "NoSuchUpload": (404, "The specified upload does not exist. The upload ID may be invalid, or the upload may have been aborted or completed."),
    "NoSuchVersion": (404, "The specified version does not exist."),
    "NotFound": (404, "Not Found"),
    "NotImplemented": (501, "A header you provided implies functionality that is not implemented."),
    "NotModified": (304, "Not Modified"),
    "PreconditionFailed": (412, "At least one of the pre-conditions you specified did not hold"),
    "RequestHeaderSectionTooLarge": (400, "Your request header section exceeds the maximum allowed size."),
    "RequestTimeTooSkewed": (403, "The difference between the request time and the server's time is too large."),
    "RequestTimeout": (400, "Your socket connection to the server was not read from or written to within the timeout period."),
    "ServiceUnavailable": (503, "Please reduce your request rate."),
    "SignatureDoesNotMatch": (403, "The request signature we calculated does not match the signature you provided. Check your key and signing method."),
    "SlowDown": (503, "Please reduce your request rate."),
    "XAmzContentSHA256Mismatch": (400, "The provided 'x-amz-content-sha256' header does not match what was computed."),
    "MaxMessageLengthExceeded": (400, "Your request was too big."),
    "MalformedTrailerError": (400, "The request contained trailing data that was not well-formed or did not conform to our published schema."),
}


class S3Error(Exception):
    """An S3 error: rendered as S3's XML error document by s3api.responses.

    `status` defaults to the table above; an unknown code (for example one the
    origin invented) must be given a status.
    """

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        status: int | None = None,
        resource: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        default_status, default_message = S3_ERRORS.get(code, (status or 500, code))
        self.code = code
        self.status = status if status is not None else default_status
        self.message = message if message is not None else default_message
        self.resource = resource
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})  # extra elements of the error document
        super().__init__(f"{code}: {self.message}")

    def __repr__(self) -> str:
        return f"S3Error(code={self.code!r}, status={self.status}, message={self.message!r}, resource={self.resource!r})"
