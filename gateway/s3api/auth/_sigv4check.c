/* gateway.s3api.auth._sigv4check: the pure work of the SigV4 fast path (auth.fastpath), compiled.
 *
 * Its twin in Python is gateway/s3api/auth/sigv4check.py: the same seven functions, the same answers
 * byte for byte (tests/s3api/test_sigv4check_twin.py compares them). What this module decides is only
 * what it can build: it answers None for a request outside the shapes it builds (a character above
 * U+00FF in the path or query, a header value or name that is not ASCII, a header twice, a signed
 * header absent, an x-amz-* header not signed), and auth.fastpath then leaves the request to the
 * general path. The checks of scopes, dates, keys and windows stay in auth.fastpath.
 *
 *   header_parts(headers) -> (credential, signed_headers, signature, x-amz-date, x-amz-content-sha256) | None
 *   canonical_query(query_string) -> (canonical query without X-Amz-Signature, the values of X-Amz-Algorithm,
 *          X-Amz-Credential, X-Amz-Date, X-Amz-Expires, X-Amz-SignedHeaders, X-Amz-Signature, AWSAccessKeyId and
 *          Signature, each None when absent, or None when all are) | None
 *   keyed(signing_key, to_sign) -> bytes: HMAC-SHA256 with that key, its padded key (RFC 2104) and the string
 *          to sign's first part ("AWS4-HMAC-SHA256\n<x-amz-date>\n<scope>\n") already hashed in
 *   verify(method, raw_path, canonical_query, headers, names, signed_headers, payload_hash, keyed, signature)
 *          -> True | False | None
 *   canonical(<the same but the signature>) -> ((canonical request, string to sign, signature), ...) | None
 *   shape(head) -> (key, x-amz-date, credential date, signature, amz-sdk-invocation-id | None,
 *          amz-sdk-request | None, range | None) | None: an SDK-signed (or presigned) GET or HEAD head
 *          cut around what changes between two sends of it, its Range too (s3api.replays keeps
 *          requests by that key)
 *   signs(canonical_request, keyed, signature) -> bool: a canonical request (bytes) signed with keyed
 *
 * SHA-256 is OpenSSL's (libcrypto; libssl-dev to build).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* ------------------------------------------------------------------------------------ SHA-256 */

/* OpenSSL's low-level SHA-256: its block function (assembler, SHA-NI where the CPU has it) with
 * nothing around it. Measured under valgrind (bench/auth_instructions.py) against a SHA-256 written
 * here from FIPS 180-4 (unrolled, gcc -O3): 38,659 against 56,587 instructions per header-signed
 * check, 10 blocks hashed a check; EVP's contexts cost more calls around the same block function. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/sha.h>
typedef SHA256_CTX sha_t;
static void sha_init(sha_t *s) { SHA256_Init(s); }
static void sha_update(sha_t *s, const unsigned char *p, size_t n) { SHA256_Update(s, p, n); }
static void sha_final(sha_t *s, unsigned char out[32]) { SHA256_Final(out, s); }

static const char HEX_LOWER[] = "0123456789abcdef";
static const char HEX_UPPER[] = "0123456789ABCDEF";

/* The two lowercase hex digits of each byte. */
static char HEX_PAIRS[256][2];

static void hex64(const unsigned char digest[32], char out[64])
{
    for (int i = 0; i < 32; i++)
        memcpy(out + 2 * i, HEX_PAIRS[digest[i]], 2);
}

/* ------------------------------------------------------------------------------------ buffers */

/* Bytes built up: on the stack up to its size, on the heap beyond. */
typedef struct {
    char *p;
    size_t n, cap;
    char stack[1536];
} buf_t;

static void buf_init(buf_t *b) { b->p = b->stack; b->n = 0; b->cap = sizeof b->stack; }
static void buf_free(buf_t *b) { if (b->p != b->stack) PyMem_Free(b->p); }

static int buf_room(buf_t *b, size_t more)
{
    if (b->n + more <= b->cap)
        return 0;
    size_t cap = (b->n + more) * 2;
    char *p = PyMem_Malloc(cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(p, b->p, b->n);
    buf_free(b);
    b->p = p;
    b->cap = cap;
    return 0;
}

static int put(buf_t *b, const void *p, size_t n)
{
    if (buf_room(b, n) < 0)
        return -1;
    memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

static int put_byte(buf_t *b, char c) { return put(b, &c, 1); }

/* ------------------------------------------------------------------------------------ text */

/* The characters of an ASCII str, or NULL (no exception) when it is not one. */
static inline const char *ascii(PyObject *s, Py_ssize_t *n)
{
    if (!PyUnicode_Check(s) || !PyUnicode_IS_ASCII(s))
        return NULL;
    *n = PyUnicode_GET_LENGTH(s);
    return (const char *)PyUnicode_DATA(s);
}

static PyObject *ascii_str(const char *p, size_t n)
{
    PyObject *s = PyUnicode_New((Py_ssize_t)n, 127);
    if (s != NULL)
        memcpy(PyUnicode_DATA(s), p, n);
    return s;
}

static int same(const char *a, Py_ssize_t an, const char *b, Py_ssize_t bn)
{
    return an == bn && memcmp(a, b, (size_t)an) == 0;
}

/* What Python's str.split() splits an ASCII value on: trimming drops it and collapses its runs. */
static int blank(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 28 && c <= 31); }

static int put_trimmed(buf_t *b, const char *p, Py_ssize_t n)
{
    /* Most values have nothing to trim: no blank but single spaces between other characters. */
    int plain = n == 0 || (p[0] != ' ' && p[n - 1] != ' ');
    for (Py_ssize_t j = 0; j < n && plain; j++)
        plain = (unsigned char)p[j] > ' ' || (p[j] == ' ' && p[j + 1] != ' ');
    if (plain)
        return put(b, p, (size_t)n);
    Py_ssize_t i = 0;
    int first = 1;
    while (i < n) {
        while (i < n && blank((unsigned char)p[i]))
            i++;
        Py_ssize_t start = i;
        while (i < n && !blank((unsigned char)p[i]))
            i++;
        if (i > start) {
            if ((!first && put_byte(b, ' ') < 0) || put(b, p + start, (size_t)(i - start)) < 0)
                return -1;
            first = 0;
        }
    }
    return 0;
}

/* 1 for the bytes uri_encode keeps (A-Z a-z 0-9 - _ . ~), 2 for "/", kept when asked; made at import. */
static unsigned char KEPT[256];

static inline int unreserved(unsigned char c, int keep_slash) { return KEPT[c] == 1 || (keep_slash && KEPT[c] == 2); }

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The byte at p[*i], a valid %XX escape decoded (*i moved past it; an invalid one kept as it is). */
static inline unsigned char decoded_at(const unsigned char *p, size_t n, size_t *i)
{
    unsigned char c = p[*i];
    int high, low;
    if (c == '%' && *i + 2 < n && (high = hex_value(p[*i + 1])) >= 0 && (low = hex_value(p[*i + 2])) >= 0) {
        c = (unsigned char)(high * 16 + low);
        *i += 2;
    }
    return c;
}

/* %XX-decode wire bytes (an invalid escape kept as it is), as common._percent_decode. */
static int percent_decode(buf_t *out, const unsigned char *p, size_t n)
{
    if (buf_room(out, n) < 0)
        return -1;
    unsigned char *o = (unsigned char *)out->p + out->n;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = decoded_at(p, n, &i);
        *o++ = c;
    }
    out->n = (size_t)(o - (unsigned char *)out->p);
    return 0;
}

/* Bytes encoded the SigV4 way (signing.uri_encode): unreserved kept, the rest %XX. */
static int percent_encode(buf_t *out, const unsigned char *p, size_t n, int keep_slash)
{
    if (buf_room(out, 3 * n) < 0)
        return -1;
    char *o = out->p + out->n;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (unreserved(c, keep_slash)) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = HEX_UPPER[c >> 4];
            *o++ = HEX_UPPER[c & 15];
        }
    }
    out->n = (size_t)(o - out->p);
    return 0;
}

/* uri_encode(_percent_decode(text)) of wire bytes: the decoded bytes, encoded. */
static int recode(buf_t *out, const unsigned char *p, size_t n, int keep_slash)
{
    if (memchr(p, '%', n) == NULL)  /* nothing to decode */
        return percent_encode(out, p, n, keep_slash);
    buf_t decoded;
    buf_init(&decoded);
    int failed = percent_decode(&decoded, p, n) < 0
                 || percent_encode(out, (const unsigned char *)decoded.p, decoded.n, keep_slash) < 0;
    buf_free(&decoded);
    return failed ? -1 : 0;
}

/* ------------------------------------------------------------------------------------ header_parts */

#define PREFIX "AWS4-HMAC-SHA256 Credential="
#define SIGNED_HEADERS ", SignedHeaders="
#define SIGNATURE ", Signature="

/* The name and value of headers[i], checked to be a pair of str. */
static int header_at(PyObject *headers, Py_ssize_t i, PyObject **name, PyObject **value)
{
    PyObject *item = PyTuple_GET_ITEM(headers, i);
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(item, 0))
        || !PyUnicode_Check(PyTuple_GET_ITEM(item, 1))) {
        PyErr_SetString(PyExc_TypeError, "headers must be a tuple of (name, value) pairs of str");
        return -1;
    }
    *name = PyTuple_GET_ITEM(item, 0);
    *value = PyTuple_GET_ITEM(item, 1);
    return 0;
}

static int named(PyObject *name, const char *what, Py_ssize_t n)
{
    Py_ssize_t length;
    const char *p = ascii(name, &length);
    return p != NULL && same(p, length, what, n);
}

static PyObject *header_parts(PyObject *module, PyObject *headers)
{
    if (!PyTuple_Check(headers)) {
        PyErr_SetString(PyExc_TypeError, "headers must be a tuple");
        return NULL;
    }
    PyObject *authorization = Py_None, *amz_date = Py_None, *payload_hash = Py_None, *name, *value;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(headers); i++) {  /* the last of a name, as dict() keeps */
        if (header_at(headers, i, &name, &value) < 0)
            return NULL;
        if (named(name, "authorization", 13))
            authorization = value;
        else if (named(name, "x-amz-date", 10))
            amz_date = value;
        else if (named(name, "x-amz-content-sha256", 20))
            payload_hash = value;
    }
    if (authorization == Py_None)
        return PyTuple_Pack(5, Py_None, Py_None, Py_None, amz_date, payload_hash);
    Py_ssize_t n = 0;
    const char *p = ascii(authorization, &n), *end = p + n;
    size_t prefix = sizeof PREFIX - 1, signed_sep = sizeof SIGNED_HEADERS - 1, signature_sep = sizeof SIGNATURE - 1;
    if (p == NULL || (size_t)n < prefix || memcmp(p, PREFIX, prefix) != 0)
        Py_RETURN_NONE;
    /* Two commas, each the start of its separator: str.partition's answer when there are only two. */
    const char *credential = p + prefix, *signed_at = memchr(credential, ',', (size_t)(end - credential));
    const char *signature_at = signed_at ? memchr(signed_at + 1, ',', (size_t)(end - signed_at - 1)) : NULL;
    if (signature_at == NULL || memchr(signature_at + 1, ',', (size_t)(end - signature_at - 1)) != NULL
        || (size_t)(end - signed_at) < signed_sep || memcmp(signed_at, SIGNED_HEADERS, signed_sep) != 0
        || signature_at < signed_at + signed_sep || end - signature_at != (Py_ssize_t)signature_sep + 64
        || memcmp(signature_at, SIGNATURE, signature_sep) != 0)
        Py_RETURN_NONE;
    const char *signed_text = signed_at + signed_sep;
    PyObject *parts[3] = {ascii_str(credential, (size_t)(signed_at - credential)),
                          ascii_str(signed_text, (size_t)(signature_at - signed_text)),
                          ascii_str(end - 64, 64)};
    PyObject *result = NULL;
    if (parts[0] != NULL && parts[1] != NULL && parts[2] != NULL)
        result = PyTuple_Pack(5, parts[0], parts[1], parts[2], amz_date, payload_hash);
    Py_XDECREF(parts[0]);
    Py_XDECREF(parts[1]);
    Py_XDECREF(parts[2]);
    return result;
}

/* ------------------------------------------------------------------------------------ canonical_query */

/* The query parameters that name a signing mechanism or a presigned URL's parts, in the order of
 * canonical_query's tuple of their values. */
static const char *const AUTH_PARAMS[] = {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                                          "X-Amz-SignedHeaders", "X-Amz-Signature", "AWSAccessKeyId", "Signature"};
static size_t AUTH_PARAM_N[] = {15, 16, 10, 13, 19, 15, 14, 9};
#define N_AUTH_PARAMS 8
#define SIGNATURE_PARAM 5

typedef struct {
    size_t name, name_n, value, value_n;  /* offsets into the encoded bytes, then */
    const char *name_p, *value_p;         /* their addresses once those are all written */
} pair_t;

static int pair_order(const pair_t *a, const pair_t *b)
{
    size_t n = a->name_n < b->name_n ? a->name_n : b->name_n;
    int c = memcmp(a->name_p, b->name_p, n);
    if (c != 0 || a->name_n != b->name_n)
        return c != 0 ? c : (a->name_n < b->name_n ? -1 : 1);
    n = a->value_n < b->value_n ? a->value_n : b->value_n;
    c = memcmp(a->value_p, b->value_p, n);
    if (c != 0 || a->value_n == b->value_n)
        return c;
    return a->value_n < b->value_n ? -1 : 1;
}

/* Which of AUTH_PARAMS decoded bytes name, or -1. */
static int auth_param(const char *p, size_t n)
{
    for (int i = 0; i < N_AUTH_PARAMS; i++)
        if (AUTH_PARAM_N[i] == n && memcmp(AUTH_PARAMS[i], p, n) == 0)
            return i;
    return -1;
}

/* uri_encode(_percent_decode(text)) of wire bytes in one pass: each byte decoded (an invalid
 * escape kept as it is, as percent_decode) and encoded at once (as percent_encode). */
static int recode_query(buf_t *out, const unsigned char *p, size_t n)
{
    if (buf_room(out, 3 * n) < 0)
        return -1;
    char *o = out->p + out->n;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = decoded_at(p, n, &i);
        if (KEPT[c] == 1) {
            *o++ = (char)c;
        } else {
            *o++ = '%';
            *o++ = HEX_UPPER[c >> 4];
            *o++ = HEX_UPPER[c & 15];
        }
    }
    out->n = (size_t)(o - out->p);
    return 0;
}

/* One name=value of the query: an auth parameter's decoded value into `found` (1: one seen twice),
 * else (and for every parameter but X-Amz-Signature) the pair encoded into `encoded`. */
static int query_pair(const unsigned char *p, size_t n, buf_t *encoded, pair_t *pair, PyObject *found[], int *kept)
{
    const unsigned char *eq = memchr(p, '=', n);
    size_t name_n = eq ? (size_t)(eq - p) : n;
    const unsigned char *value = eq ? eq + 1 : p + n;
    size_t value_n = (size_t)(p + n - value);
    buf_t decoded;  /* the name decoded, or the value of an auth parameter: when it has a "%" */
    buf_init(&decoded);
    const char *name = (const char *)p;
    int result = -1;
    if (memchr(p, '%', name_n) != NULL) {
        if (percent_decode(&decoded, p, name_n) < 0)
            goto done;
        name = decoded.p;
        name_n = decoded.n;
    }
    int which = auth_param(name, name_n);
    if (which >= 0) {
        if (found[which] != NULL) {
            result = 1;
            goto done;
        }
        const char *text = (const char *)value;
        size_t text_n = value_n;
        if (memchr(value, '%', value_n) != NULL) {
            decoded.n = 0;  /* the name is one of AUTH_PARAMS: not wanted any longer */
            if (percent_decode(&decoded, value, value_n) < 0)
                goto done;
            text = decoded.p;
            text_n = decoded.n;
        }
        size_t high = 0;  /* bytes above 0x7f: none, and UTF-8's answer is the ASCII str, made for less */
        for (size_t i = 0; i < text_n; i++)
            high |= (unsigned char)text[i] & 0x80;
        found[which] = high ? PyUnicode_DecodeUTF8(text, (Py_ssize_t)text_n, "surrogateescape") : ascii_str(text, text_n);
        if (found[which] == NULL || which == SIGNATURE_PARAM) {
            result = found[which] == NULL ? -1 : 0;
            goto done;
        }
        name = AUTH_PARAMS[which];
    }
    pair->name = encoded->n;
    if (percent_encode(encoded, (const unsigned char *)name, name_n, 0) < 0)  /* the name, decoded above */
        goto done;
    pair->name_n = encoded->n - pair->name;
    pair->value = encoded->n;
    if (recode_query(encoded, value, value_n) < 0)
        goto done;
    pair->value_n = encoded->n - pair->value;
    *kept = 1;
    result = 0;
done:
    buf_free(&decoded);
    return result;
}

/* The canonical query of the kept pairs (sorted here: insertion, as queries have few) into `joined`. */
static int join_pairs(buf_t *joined, pair_t *pairs, size_t kept_n, const char *encoded)
{
    for (size_t i = 0; i < kept_n; i++) {
        pair_t pair = pairs[i];
        pair.name_p = encoded + pair.name;
        pair.value_p = encoded + pair.value;
        size_t j = i;
        for (; j > 0 && pair_order(&pairs[j - 1], &pair) > 0; j--)
            pairs[j] = pairs[j - 1];
        pairs[j] = pair;
    }
    for (size_t i = 0; i < kept_n; i++)
        if ((i && put_byte(joined, '&') < 0) || put(joined, pairs[i].name_p, pairs[i].name_n) < 0
            || put_byte(joined, '=') < 0 || put(joined, pairs[i].value_p, pairs[i].value_n) < 0)
            return -1;
    return 0;
}

static PyObject *canonical_query(PyObject *module, PyObject *query)
{
    if (!PyUnicode_Check(query)) {
        PyErr_SetString(PyExc_TypeError, "the query string must be a str");
        return NULL;
    }
    if (PyUnicode_KIND(query) != PyUnicode_1BYTE_KIND)
        Py_RETURN_NONE;  /* a character above U+00FF: not wire bytes read as latin-1 */
    const unsigned char *p = PyUnicode_1BYTE_DATA(query), *amp;
    size_t n = (size_t)PyUnicode_GET_LENGTH(query), count = 1, kept_n = 0, found_n = 0;
    for (const unsigned char *at = p; (amp = memchr(at, '&', (size_t)(p + n - at))) != NULL; at = amp + 1)
        count++;
    pair_t stack[32], *pairs = count <= 32 ? stack : PyMem_Malloc(count * sizeof(pair_t));
    PyObject *found[N_AUTH_PARAMS] = {NULL}, *result = NULL, *canonical = NULL, *values = NULL;
    buf_t encoded, joined;
    buf_init(&encoded);
    buf_init(&joined);
    if (pairs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t start = 0; start <= n;) {
        amp = memchr(p + start, '&', n - start);
        size_t end = amp ? (size_t)(amp - p) : n;
        int kept = 0, outcome = end > start ? query_pair(p + start, end - start, &encoded, &pairs[kept_n], found, &kept) : 0;
        if (outcome != 0) {
            if (outcome > 0)
                result = Py_NewRef(Py_None);  /* an auth parameter twice: the general path's to answer */
            goto done;
        }
        kept_n += kept;
        start = end + 1;
    }
    if (join_pairs(&joined, pairs, kept_n, encoded.p) < 0 || (canonical = ascii_str(joined.p, joined.n)) == NULL)
        goto done;
    for (int i = 0; i < N_AUTH_PARAMS; i++)
        found_n += found[i] != NULL;
    values = found_n == 0 ? Py_NewRef(Py_None) : PyTuple_New(N_AUTH_PARAMS);
    for (int i = 0; i < N_AUTH_PARAMS && found_n != 0 && values != NULL; i++) {
        PyTuple_SET_ITEM(values, i, found[i] != NULL ? found[i] : Py_NewRef(Py_None));
        found[i] = NULL;  /* the tuple's now */
    }
    if (values != NULL)
        result = PyTuple_Pack(2, canonical, values);
done:
    for (int i = 0; i < N_AUTH_PARAMS; i++)
        Py_XDECREF(found[i]);
    Py_XDECREF(canonical);
    Py_XDECREF(values);
    if (pairs != stack)
        PyMem_Free(pairs);
    buf_free(&encoded);
    buf_free(&joined);
    return result;
}

/* ------------------------------------------------------------------------------------ keyed */

/* HMAC-SHA256 (RFC 2104) with the padded key taken in, the inner hash also the string to sign's
 * first part ("AWS4-HMAC-SHA256\n<x-amz-date>\n<scope>\n"), which follows it here. */
typedef struct {
    sha_t inner, outer;
    Py_ssize_t to_sign_n;
} keyed_t;

static PyObject *keyed(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t to_sign_n;
    const char *to_sign = nargs == 2 ? ascii(args[1], &to_sign_n) : NULL;
    if (nargs != 2 || !PyBytes_Check(args[0]) || PyBytes_GET_SIZE(args[0]) > 64 || to_sign == NULL) {
        PyErr_SetString(PyExc_ValueError, "keyed(signing key: at most 64 bytes, string to sign's first part: ASCII)");
        return NULL;
    }
    unsigned char inner[64] = {0}, outer[64];
    memcpy(inner, PyBytes_AS_STRING(args[0]), (size_t)PyBytes_GET_SIZE(args[0]));
    for (int i = 0; i < 64; i++) {
        outer[i] = inner[i] ^ 0x5c;
        inner[i] ^= 0x36;
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(keyed_t) + to_sign_n);
    if (result == NULL)
        return NULL;
    keyed_t *k = (keyed_t *)PyBytes_AS_STRING(result);
    sha_init(&k->inner);
    sha_update(&k->inner, inner, 64);
    sha_update(&k->inner, (const unsigned char *)to_sign, (size_t)to_sign_n);
    sha_init(&k->outer);
    sha_update(&k->outer, outer, 64);
    k->to_sign_n = to_sign_n;
    memcpy(k + 1, to_sign, (size_t)to_sign_n);
    return result;
}

/* ------------------------------------------------------------------------------------ verify, canonical */

enum { METHOD, RAW_PATH, QUERY, HEADERS, NAMES, SIGNED_TEXT, PAYLOAD_HASH, KEYED, PROVIDED };

typedef struct {
    const char *name;
    Py_ssize_t name_n;
    PyObject *value;
} header_t;

/* The headers' names (checked ASCII, each once, every x-amz-* one among the signed `names`) into
 * `h`: 0, 1 when the request is not of a shape built here, -1 with an exception. */
static int header_names(header_t *h, PyObject *headers, PyObject *names)
{
    Py_ssize_t count = PyTuple_GET_SIZE(headers), signed_n = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *name;
        if (header_at(headers, i, &name, &h[i].value) < 0)
            return -1;
        if ((h[i].name = ascii(name, &h[i].name_n)) == NULL)
            return 1;
        for (Py_ssize_t j = 0; j < i; j++)
            if (same(h[j].name, h[j].name_n, h[i].name, h[i].name_n))
                return 1;
        if (h[i].name_n >= 6 && memcmp(h[i].name, "x-amz-", 6) == 0) {
            int found = 0;
            for (Py_ssize_t k = 0; k < signed_n && !found; k++)
                found = named(PyTuple_GET_ITEM(names, k), h[i].name, h[i].name_n);
            if (!found)
                return 1;
        }
    }
    return 0;
}

/* The canonical header block of the signed `names` into `out`: 0, or 1 when the request is not of
 * a shape built here (a name twice, a name or signed value not ASCII, a signed header absent, an
 * x-amz-* header not signed), or -1 with an exception. */
static int header_block(buf_t *out, PyObject *headers, PyObject *names)
{
    Py_ssize_t count = PyTuple_GET_SIZE(headers), signed_n = PyTuple_GET_SIZE(names);
    header_t stack[32], *h = count <= 32 ? stack : PyMem_Malloc((size_t)count * sizeof(header_t));
    if (h == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    int shape = header_names(h, headers, names);
    for (Py_ssize_t k = 0; k < signed_n && shape == 0; k++) {
        Py_ssize_t name_n, value_n = 0, i = 0;
        const char *name = ascii(PyTuple_GET_ITEM(names, k), &name_n), *value = NULL;
        while (name != NULL && i < count && !same(h[i].name, h[i].name_n, name, name_n))
            i++;
        if (name == NULL || i == count || (value = ascii(h[i].value, &value_n)) == NULL)
            shape = 1;
        else if (put(out, name, (size_t)name_n) < 0 || put_byte(out, ':') < 0 || put_trimmed(out, value, value_n) < 0
                 || put_byte(out, '\n') < 0)
            shape = -1;
    }
    if (h != stack)
        PyMem_Free(h);
    return shape;
}

/* The canonical URIs the general path tries (sigv4._canonical_uris): the path encoded once, and
 * the path as received when that differs. Into `out`, `second` the offset of the second or 0. */
static int canonical_uris(buf_t *out, PyObject *raw_path, size_t *second)
{
    const unsigned char *p = PyUnicode_1BYTE_DATA(raw_path);
    size_t n = (size_t)PyUnicode_GET_LENGTH(raw_path);
    if (n == 0) {
        p = (const unsigned char *)"/";
        n = 1;
    }
    if (recode(out, p, n, 1) < 0)
        return -1;
    *second = 0;
    if (out->n == n && memcmp(out->p, p, n) == 0)
        return 0;
    *second = out->n;
    for (size_t i = 0; i < n; i++) {  /* as received, in UTF-8 as the canonical request is hashed */
        char two[2] = {(char)(0xc0 | p[i] >> 6), (char)(0x80 | (p[i] & 0x3f))};
        if (p[i] < 0x80 ? put_byte(out, (char)p[i]) < 0 : put(out, two, 2) < 0)
            return -1;
    }
    return 0;
}

/* The signature of one canonical URI, with its canonical request and string to sign when asked. */
static int sign_one(PyObject *const *args, const char *uri, size_t uri_n, const buf_t *block, char signature[64],
                    PyObject **request_text, PyObject **to_sign_text)
{
    Py_ssize_t n[PAYLOAD_HASH + 1];
    const char *s[PAYLOAD_HASH + 1];
    for (int i = METHOD; i <= PAYLOAD_HASH; i++)
        if (i != RAW_PATH && i != HEADERS && i != NAMES)
            s[i] = ascii(args[i], &n[i]);
    buf_t request;
    buf_init(&request);
    int failed = put(&request, s[METHOD], (size_t)n[METHOD]) < 0 || put_byte(&request, '\n') < 0
                 || put(&request, uri, uri_n) < 0 || put_byte(&request, '\n') < 0
                 || put(&request, s[QUERY], (size_t)n[QUERY]) < 0 || put_byte(&request, '\n') < 0
                 || put(&request, block->p, block->n) < 0 || put_byte(&request, '\n') < 0
                 || put(&request, s[SIGNED_TEXT], (size_t)n[SIGNED_TEXT]) < 0 || put_byte(&request, '\n') < 0
                 || put(&request, s[PAYLOAD_HASH], (size_t)n[PAYLOAD_HASH]) < 0;
    if (!failed) {
        const keyed_t *k = (const keyed_t *)PyBytes_AS_STRING(args[KEYED]);
        unsigned char digest[32];
        char request_hash[64];
        sha_t sha;
        sha_init(&sha);
        sha_update(&sha, (const unsigned char *)request.p, request.n);
        sha_final(&sha, digest);
        hex64(digest, request_hash);
        sha = k->inner;  /* the string to sign's first part already in */
        sha_update(&sha, (const unsigned char *)request_hash, 64);
        sha_final(&sha, digest);
        sha = k->outer;
        sha_update(&sha, digest, 32);
        sha_final(&sha, digest);
        hex64(digest, signature);
        if (request_text != NULL) {
            buf_t to_sign;
            buf_init(&to_sign);
            failed = put(&to_sign, k + 1, (size_t)k->to_sign_n) < 0 || put(&to_sign, request_hash, 64) < 0;
            *request_text = failed ? NULL : PyUnicode_DecodeUTF8(request.p, (Py_ssize_t)request.n, "strict");
            *to_sign_text = failed ? NULL : ascii_str(to_sign.p, to_sign.n);
            failed = *request_text == NULL || *to_sign_text == NULL;
            buf_free(&to_sign);
        }
    }
    buf_free(&request);
    return failed ? -1 : 0;
}

/* verify (with the signature given) and canonical (without): the request's canonical forms built
 * once each, signed with `keyed`; None when the request is not of a shape built here. */
static PyObject *check(PyObject *const *args, Py_ssize_t nargs, int verifying)
{
    const char *what = verifying ? "verify" : "canonical";
    int arity = verifying ? PROVIDED + 1 : PROVIDED;
    if (nargs != arity)
        return PyErr_Format(PyExc_TypeError, "%s takes %d arguments", what, arity);
    for (int i = 0; i < arity; i++) {
        int ok = i == HEADERS || i == NAMES ? PyTuple_Check(args[i]) : i == KEYED ? PyBytes_Check(args[i])
                                                                                  : PyUnicode_Check(args[i]);
        if (!ok)
            return PyErr_Format(PyExc_TypeError, "%s: argument %d is not of its type", what, i + 1);
    }
    if (PyBytes_GET_SIZE(args[KEYED]) < (Py_ssize_t)sizeof(keyed_t)
        || PyBytes_GET_SIZE(args[KEYED]) != (Py_ssize_t)sizeof(keyed_t)
                                            + ((const keyed_t *)PyBytes_AS_STRING(args[KEYED]))->to_sign_n) {
        PyErr_SetString(PyExc_ValueError, "keyed: not what keyed() made");
        return NULL;
    }
    if (!PyUnicode_IS_ASCII(args[METHOD]) || !PyUnicode_IS_ASCII(args[QUERY]) || !PyUnicode_IS_ASCII(args[SIGNED_TEXT])
        || !PyUnicode_IS_ASCII(args[PAYLOAD_HASH]) || PyUnicode_KIND(args[RAW_PATH]) != PyUnicode_1BYTE_KIND)
        Py_RETURN_NONE;
    buf_t block, uris;
    buf_init(&block);
    buf_init(&uris);
    PyObject *result = NULL, *forms[2] = {NULL, NULL};
    size_t second;
    int shape = header_block(&block, args[HEADERS], args[NAMES]);
    if (shape != 0 || canonical_uris(&uris, args[RAW_PATH], &second) < 0) {
        result = shape > 0 ? Py_NewRef(Py_None) : NULL;
        goto done;
    }
    size_t tried = second ? 2 : 1, starts[2] = {0, second}, ends[2] = {second ? second : uris.n, uris.n};
    Py_ssize_t provided_n = 0;
    const char *provided = verifying ? ascii(args[PROVIDED], &provided_n) : NULL;
    int matched = 0;
    for (size_t u = 0; u < tried; u++) {
        char signature[64];
        PyObject *request = NULL, *to_sign = NULL;
        if (sign_one(args, uris.p + starts[u], ends[u] - starts[u], &block, signature,
                     verifying ? NULL : &request, verifying ? NULL : &to_sign) < 0) {
            Py_XDECREF(request);
            Py_XDECREF(to_sign);
            goto done;
        }
        if (verifying) {
            unsigned char differ = provided == NULL || provided_n != 64;
            for (int i = 0; i < 64 && provided_n == 64; i++)  /* constant time: every byte compared */
                differ |= (unsigned char)(signature[i] ^ provided[i]);
            matched |= !differ;
        } else {
            PyObject *text = ascii_str(signature, 64);
            forms[u] = text == NULL ? NULL : PyTuple_Pack(3, request, to_sign, text);
            Py_XDECREF(text);
            Py_DECREF(request);
            Py_DECREF(to_sign);
            if (forms[u] == NULL)
                goto done;
        }
    }
    result = verifying ? PyBool_FromLong(matched) : PyTuple_Pack((Py_ssize_t)tried, forms[0], forms[1]);
done:
    Py_XDECREF(forms[0]);
    Py_XDECREF(forms[1]);
    buf_free(&block);
    buf_free(&uris);
    return result;
}

static PyObject *verify(PyObject *module, PyObject *const *args, Py_ssize_t nargs) { return check(args, nargs, 1); }
static PyObject *canonical(PyObject *module, PyObject *const *args, Py_ssize_t nargs) { return check(args, nargs, 0); }

/* ------------------------------------------------------------------------------------ shape, signs */

/* The bytes a request line's target may hold (gateway.requesthead), a header name's (a token), and
 * what a value of one of the slots (amz-sdk-invocation-id, amz-sdk-request) may hold besides single
 * inner spaces: made at import. */
static unsigned char TARGET[256], TOKEN[256];

static int lower_is(const unsigned char *p, size_t n, const char *what)
{
    size_t m = strlen(what);
    if (n != m)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]) != (unsigned char)what[i])
            return 0;
    return 1;
}

static int lower_has(const unsigned char *p, size_t n, const char *what)
{
    size_t m = strlen(what);
    for (size_t i = 0; i + m <= n; i++)
        if (lower_is(p + i, m, what))
            return 1;
    return 0;
}

static int digits(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < '0' || p[i] > '9')
            return 0;
    return 1;
}

/* A slot's value: visible ASCII with single inner spaces, neither end a space (its canonical form). */
static int plain_value(const unsigned char *p, size_t n)
{
    if (n == 0 || p[0] == ' ' || p[n - 1] == ' ')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (p[i] < 0x20 || p[i] > 0x7e || (p[i] == ' ' && p[i + 1] == ' '))
            return 0;
    return 1;
}

static int cred_char(unsigned char c) { return c > 0x20 && c < 0x7f && c != '/' && c != ','; }

#define AUTH_HEAD "AWS4-HMAC-SHA256 Credential="
#define AUTH_SCOPE_END "/s3/aws4_request, SignedHeaders="
#define AUTH_SIGNATURE ", Signature="

/* Where the credential's date starts in an Authorization value of the SDKs' exact form, or 0. */
static size_t authorization_form(const unsigned char *p, size_t n)
{
    size_t head = sizeof AUTH_HEAD - 1, scope_end = sizeof AUTH_SCOPE_END - 1, sig = sizeof AUTH_SIGNATURE - 1;
    if (n < head + 64 + sig || memcmp(p, AUTH_HEAD, head) != 0)
        return 0;
    size_t i = head, key = head;
    while (i < n && cred_char(p[i]))
        i++;
    if (i == key || i + 10 > n || p[i] != '/' || !digits(p + i + 1, 8) || p[i + 9] != '/')
        return 0;
    size_t date = i + 1, region = i + 10;
    for (i = region; i < n && cred_char(p[i]); i++)
        ;
    if (i == region || n - i < scope_end || memcmp(p + i, AUTH_SCOPE_END, scope_end) != 0)
        return 0;
    size_t names = i + scope_end;
    for (i = names; i < n && p[i] > 0x20 && p[i] < 0x7f && p[i] != ','; i++)
        ;
    if (i == names || n - i != sig + 64 || memcmp(p + i, AUTH_SIGNATURE, sig) != 0)
        return 0;
    for (i += sig; i < n; i++)
        if (!((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'f')))
            return 0;
    return date;
}

enum { AMZ_DATE, CREDENTIAL_DATE, SIGNATURE_SLOT, INVOCATION_ID, SDK_REQUEST, RANGE_SLOT, SLOTS };

/* One header line of a head being shaped: its slot's place in `at`/`len` (offsets into the head) and
 * `seen` counted; 0, or 1: not of the usual shape. */
static int shape_line(const unsigned char *head, size_t start, size_t end, size_t at[SLOTS], size_t len[SLOTS],
                      int seen[SLOTS], int presigned)
{
    const unsigned char *p = head + start;
    size_t n = end - start, colon = 0;
    while (colon < n && TOKEN[p[colon]])
        colon++;
    if (colon == 0 || colon == n || p[colon] != ':')
        return 1;
    for (size_t i = colon + 1; i < n; i++)
        if ((p[i] < 0x20 || p[i] > 0x7e) && p[i] != '\t')
            return 1;
    if (presigned && lower_is(p, colon, "x-amz-content-sha256"))
        return 1;  /* (auth.fastpath.presigned_fast leaves it to the general path) */
    int which = lower_is(p, colon, "authorization") ? SIGNATURE_SLOT : lower_is(p, colon, "x-amz-date") ? AMZ_DATE
                : lower_is(p, colon, "amz-sdk-invocation-id") ? INVOCATION_ID
                : lower_is(p, colon, "amz-sdk-request") ? SDK_REQUEST : lower_is(p, colon, "range") ? RANGE_SLOT : -1;
    if (which < 0)
        return 0;
    if (seen[which]++ || n < colon + 3 || p[colon + 1] != ' ')  /* "Name: value", the value its canonical form */
        return 1;
    const unsigned char *value = p + colon + 2;
    size_t value_n = n - colon - 2, offset = start + colon + 2;
    if (!plain_value(value, value_n))
        return 1;
    if (which == AMZ_DATE) {
        if (value_n != 16 || !digits(value, 8) || value[8] != 'T' || !digits(value + 9, 6) || value[15] != 'Z')
            return 1;
    } else if (which == SIGNATURE_SLOT) {
        size_t date = authorization_form(value, value_n);
        if (date == 0)
            return 1;
        at[CREDENTIAL_DATE] = offset + date;
        len[CREDENTIAL_DATE] = 8;
        offset += value_n - 64;
        value_n = 64;
    }
    at[which] = offset;
    len[which] = value_n;
    return 0;
}

/* Whether text names (or may name) a signing parameter: x-amz-*, *signature*, AWSAccessKeyId. */
static int signing_name(const unsigned char *p, size_t n)
{
    return lower_has(p, n, "signature") || lower_has(p, n, "x-amz-") || lower_has(p, n, "awsaccesskeyid");
}

static int alnum(unsigned char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }

/* Where the date starts in an X-Amz-Credential value as the SDKs encode it
 * (AK%2FYYYYMMDD%2FREGION%2Fs3%2Faws4_request, AK and REGION of letters, digits and "-"), or 0. */
static size_t presigned_credential(const unsigned char *p, size_t n)
{
    static const char tail[] = "%2Fs3%2Faws4_request";
    size_t i = 0, tail_n = sizeof tail - 1;
    while (i < n && alnum(p[i]))
        i++;
    if (i == 0 || i + 14 > n || memcmp(p + i, "%2F", 3) != 0 || !digits(p + i + 3, 8) || memcmp(p + i + 11, "%2F", 3) != 0)
        return 0;
    size_t date = i + 3, region = i + 14;
    for (i = region; i < n && (alnum(p[i]) || p[i] == '-'); i++)
        ;
    if (i == region || n - i != tail_n || memcmp(p + i, tail, tail_n) != 0)
        return 0;
    return date;
}

static const char *const PRESIGN_PARAMS[] = {"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                                             "X-Amz-SignedHeaders", "X-Amz-Signature"};

/* One value of the six presigned parameters (`which`, at `offset` in the head): 0, or 1 when it is not
 * of the SDKs' form; the slots' places into at/len. */
static int presigned_value(int which, const unsigned char *v, size_t n, size_t offset, size_t at[SLOTS],
                           size_t len[SLOTS])
{
    size_t date;
    switch (which) {
    case 0:
        return n == 16 && memcmp(v, "AWS4-HMAC-SHA256", 16) == 0 ? 0 : 1;
    case 1:
        if ((date = presigned_credential(v, n)) == 0)
            return 1;
        at[CREDENTIAL_DATE] = offset + date;
        len[CREDENTIAL_DATE] = 8;
        return 0;
    case 2:
        if (n != 16 || !digits(v, 8) || v[8] != 'T' || !digits(v + 9, 6) || v[15] != 'Z')
            return 1;
        at[AMZ_DATE] = offset;
        len[AMZ_DATE] = 16;
        return 0;
    case 3:
        return n >= 1 && n <= 12 && digits(v, n) ? 0 : 1;
    case 4:
        return n >= 1 ? 0 : 1;
    default:
        if (n != 64)
            return 1;
        for (size_t i = 0; i < 64; i++)
            if (!((v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'f')))
                return 1;
        at[SIGNATURE_SLOT] = offset;
        len[SIGNATURE_SLOT] = 64;
        return 0;
    }
}

/* A presigned URL's query (head[start:end]): the six X-Amz-* parameters once each, named as the SDKs
 * name them, of their forms; no other parameter whose name may name a signing one. 0, or 1. */
static int presigned_query(const unsigned char *head, size_t start, size_t end, size_t at[SLOTS], size_t len[SLOTS],
                           int seen[SLOTS])
{
    int found = 0;
    for (size_t i = start; i <= end;) {
        const unsigned char *amp = memchr(head + i, '&', end - i);
        size_t stop = amp ? (size_t)(amp - head) : end, n = stop - i;
        const unsigned char *p = head + i, *eq = memchr(p, '=', n);
        size_t name_n = eq ? (size_t)(eq - p) : n;
        if (signing_name(p, name_n) || memchr(p, '%', name_n) != NULL) {
            int which = -1;
            for (int k = 0; k < 6; k++)
                if (strlen(PRESIGN_PARAMS[k]) == name_n && memcmp(PRESIGN_PARAMS[k], p, name_n) == 0)
                    which = k;
            if (which < 0 || eq == NULL || (found & (1 << which))
                || presigned_value(which, eq + 1, n - name_n - 1, i + name_n + 1, at, len) != 0)
                return 1;
            found |= 1 << which;
        }
        i = stop + 1;
    }
    seen[AMZ_DATE] = seen[SIGNATURE_SLOT] = 1;
    return found == 63 ? 0 : 1;
}

/* The slots' places in `head` when it is one request head of the usual shape: 0, or 1 when not. */
static int shape_slots(const unsigned char *head, size_t n, size_t at[SLOTS], size_t len[SLOTS], int seen[SLOTS])
{
    if (n < 4 || memcmp(head + n - 4, "\r\n\r\n", 4) != 0)
        return 1;
    const unsigned char *eol = memchr(head, '\r', n);
    size_t line = (size_t)(eol - head), method = head[0] == 'G' ? 3 : 4;
    if (line < method + 11 || memcmp(head, method == 3 ? "GET /" : "HEAD /", method + 2) != 0
        || head[line + 1] != '\n' || memcmp(head + line - 9, " HTTP/1.1", 9) != 0)
        return 1;
    size_t target = method + 1, target_end = line - 9;
    for (size_t i = target; i < target_end; i++)
        if (!TARGET[head[i]])
            return 1;
    const unsigned char *query = memchr(head + target, '?', target_end - target);
    int presigned = 0;
    if (query != NULL && signing_name(query, (size_t)(head + target_end - query))) {
        if (presigned_query(head, (size_t)(query - head) + 1, target_end, at, len, seen) != 0)
            return 1;
        presigned = 1;
    }
    for (size_t start = line + 2; start < n - 2;) {
        const unsigned char *cr = memchr(head + start, '\r', n - start);
        size_t end = (size_t)(cr - head);
        if (head[end + 1] != '\n' || end == start || shape_line(head, start, end, at, len, seen, presigned) != 0)
            return 1;
        start = end + 2;
    }
    return seen[SIGNATURE_SLOT] == 1 && seen[AMZ_DATE] == 1 ? 0 : 1;
}

static PyObject *shape(PyObject *module, PyObject *head_bytes)
{
    if (!PyBytes_Check(head_bytes)) {
        PyErr_SetString(PyExc_TypeError, "shape takes the bytes of a request head");
        return NULL;
    }
    const unsigned char *head = (const unsigned char *)PyBytes_AS_STRING(head_bytes);
    size_t n = (size_t)PyBytes_GET_SIZE(head_bytes), at[SLOTS] = {0}, len[SLOTS] = {0};
    int seen[SLOTS] = {0};
    if (shape_slots(head, n, at, len, seen) != 0)
        Py_RETURN_NONE;
    /* The key: the head without the slots' values, cut in the order they come. */
    int order[SLOTS] = {0}, count = 0;
    for (int i = 0; i < SLOTS; i++)
        if (seen[i] || i == CREDENTIAL_DATE)
            order[count++] = i;
    for (int i = 1; i < count; i++)
        for (int j = i; j > 0 && at[order[j]] < at[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    buf_t key;
    buf_init(&key);
    size_t from = 0;
    for (int i = 0; i < count; i++) {
        if (put(&key, head + from, at[order[i]] - from) < 0) {
            buf_free(&key);
            return NULL;
        }
        from = at[order[i]] + len[order[i]];
    }
    PyObject *result = NULL, *parts[SLOTS + 1] = {NULL};
    if (put(&key, head + from, n - from) == 0) {
        parts[0] = PyBytes_FromStringAndSize(key.p, (Py_ssize_t)key.n);
        for (int i = 0; i < SLOTS; i++)
            parts[i + 1] = seen[i] || i == CREDENTIAL_DATE ? ascii_str((const char *)head + at[i], len[i])
                                                           : Py_NewRef(Py_None);
        int made = 1;
        for (int i = 0; i <= SLOTS; i++)
            made &= parts[i] != NULL;
        if (made)
            result = PyTuple_Pack(7, parts[0], parts[1], parts[2], parts[3], parts[4], parts[5], parts[6]);
    }
    for (int i = 0; i <= SLOTS; i++)
        Py_XDECREF(parts[i]);
    buf_free(&key);
    return result;
}

/* signs(canonical_request, keyed, signature): whether the request's signature (64 lowercase hex) is
 * that of `canonical_request` (bytes, as hashed) with `keyed`, compared in constant time. */
static PyObject *signs(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1]) || !PyUnicode_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "signs(canonical request: bytes, keyed: bytes, signature: str)");
        return NULL;
    }
    if (PyBytes_GET_SIZE(args[1]) < (Py_ssize_t)sizeof(keyed_t)
        || PyBytes_GET_SIZE(args[1]) != (Py_ssize_t)sizeof(keyed_t)
                                        + ((const keyed_t *)PyBytes_AS_STRING(args[1]))->to_sign_n) {
        PyErr_SetString(PyExc_ValueError, "keyed: not what keyed() made");
        return NULL;
    }
    Py_ssize_t provided_n = 0;
    const char *provided = ascii(args[2], &provided_n);
    if (provided == NULL || provided_n != 64)
        Py_RETURN_FALSE;
    const keyed_t *k = (const keyed_t *)PyBytes_AS_STRING(args[1]);
    unsigned char digest[32];
    char hex[64];
    sha_t sha;
    sha_init(&sha);
    sha_update(&sha, (const unsigned char *)PyBytes_AS_STRING(args[0]), (size_t)PyBytes_GET_SIZE(args[0]));
    sha_final(&sha, digest);
    hex64(digest, hex);
    sha = k->inner;
    sha_update(&sha, (const unsigned char *)hex, 64);
    sha_final(&sha, digest);
    sha = k->outer;
    sha_update(&sha, digest, 32);
    sha_final(&sha, digest);
    hex64(digest, hex);
    unsigned char differ = 0;
    for (int i = 0; i < 64; i++)  /* constant time: every byte compared */
        differ |= (unsigned char)(hex[i] ^ provided[i]);
    return PyBool_FromLong(!differ);
}

static PyMethodDef methods[] = {
    {"header_parts", header_parts, METH_O, "(credential, signed headers, signature, x-amz-date, "
     "x-amz-content-sha256) of a request's headers, or None"},
    {"canonical_query", canonical_query, METH_O, "(canonical query, (the auth parameters' values) or None) or None"},
    {"keyed", (PyCFunction)(void (*)(void))keyed, METH_FASTCALL,
     "HMAC-SHA256 with a signing key, its padded key and the string to sign's first part hashed in"},
    {"verify", (PyCFunction)(void (*)(void))verify, METH_FASTCALL, "whether the signature matches; None: not built here"},
    {"canonical", (PyCFunction)(void (*)(void))canonical, METH_FASTCALL,
     "((canonical request, string to sign, signature), ...) of each canonical URI, or None"},
    {"shape", shape, METH_O, "(key, x-amz-date, credential date, signature, invocation id, sdk request, range) "
     "of an SDK-signed GET or HEAD head, or None"},
    {"signs", (PyCFunction)(void (*)(void))signs, METH_FASTCALL,
     "whether a canonical request signed with keyed() gives the signature"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_sigv4check", "The SigV4 fast path's pure work, compiled (twin: sigv4check).", 0,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sigv4check(void)
{
    for (int i = 0; i < 256; i++) {
        HEX_PAIRS[i][0] = HEX_LOWER[i >> 4];
        HEX_PAIRS[i][1] = HEX_LOWER[i & 15];
        KEPT[i] = (i >= 'A' && i <= 'Z') || (i >= 'a' && i <= 'z') || (i >= '0' && i <= '9') || i == '-' || i == '_'
                  || i == '.' || i == '~' ? 1 : i == '/' ? 2 : 0;
        TARGET[i] = KEPT[i] == 1 || (i != 0 && strchr("!$&'()*+,;=:@/%?", i) != NULL);
        TOKEN[i] = KEPT[i] == 1 || (i != 0 && strchr("!#$%&'*+^`|", i) != NULL);
    }
    return PyModuleDef_Init(&module);
}
