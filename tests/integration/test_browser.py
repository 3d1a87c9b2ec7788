"""A web page in a real browser (headless chromium, as tests/admin/test_dashboard.py drives it)
reads and uploads through the gateway from another origin: the browser's own CORS checks decide
what the page may see, as they would against S3. The page is served by a plain HTTP server on
another port (another origin than the gateway's)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.admin.test_dashboard import browser  # noqa: F401 (the fixture)

pytestmark = pytest.mark.usefixtures("clean_origin")

# Runs in the page: every fetch's outcome, or the error the browser gave instead.
SCRIPT = """
const [getUrl, postUrl, fields, blockedUrl, done] = arguments;
const outcome = {};
try {
  const ranged = await fetch(getUrl, {headers: {"Range": "bytes=2-5", "Cache-Control": "no-cache"}});
  outcome.get = {status: ranged.status, text: await ranged.text(), etag: ranged.headers.get("etag"),
                 cache: ranged.headers.get("x-cache")};
} catch (e) { outcome.get = {error: String(e)}; }
try {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) form.append(name, value);
  form.append("file", new Blob(["uploaded from a page"], {type: "text/plain"}), "note.txt");
  const posted = await fetch(postUrl, {method: "POST", body: form});
  outcome.post = {status: posted.status, text: await posted.text()};
} catch (e) { outcome.post = {error: String(e)}; }
try {
  const blocked = await fetch(blockedUrl);
  outcome.blocked = {status: blocked.status};
} catch (e) { outcome.blocked = {error: String(e)}; }
done(outcome);
"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"<!doctype html><title>app</title><p>an app page</p>"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def page() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_a_page_reads_and_uploads_across_origins(browser, page, gateway, s3, direct):  # noqa: F811
    for bucket in ("web", "closed"):
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="data.txt", Body=b"0123456789")
    s3.put_bucket_cors(Bucket="web", CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": [page], "AllowedMethods": ["GET", "HEAD", "POST"], "AllowedHeaders": ["*"],
         "ExposeHeaders": ["ETag", "x-cache"], "MaxAgeSeconds": 60}]})
    get_url = s3.generate_presigned_url("get_object", Params={"Bucket": "web", "Key": "data.txt"})
    s3.get_object(Bucket="web", Key="data.txt")["Body"].read()  # cached: the page's read is a hit
    post = s3.generate_presigned_post("web", "uploads/${filename}", Fields={"success_action_status": "201"},
                                      Conditions=[{"success_action_status": "201"}])
    blocked_url = s3.generate_presigned_url("get_object", Params={"Bucket": "closed", "Key": "data.txt"})

    browser.get(page + "/")
    browser.set_script_timeout(30)
    outcome = browser.execute_async_script(SCRIPT, get_url, post["url"], post["fields"], blocked_url)

    assert outcome["get"] == {"status": 206, "text": "2345", "etag": s3.head_object(Bucket="web", Key="data.txt")["ETag"],
                              "cache": "hit-mem"}
    assert outcome["post"]["status"] == 201 and "<Key>uploads/note.txt</Key>" in outcome["post"]["text"]
    assert direct.get_object(Bucket="web", Key="uploads/note.txt")["Body"].read() == b"uploaded from a page"
    # No CORS rules on that bucket: the browser keeps the answer from the page.
    assert "error" in outcome["blocked"] and "Failed to fetch" in outcome["blocked"]["error"]
