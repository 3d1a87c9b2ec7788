// The AWS SDK for JavaScript v3 scenario of tests/integration/test_sdk_clients.py, run against the gateway.
//
// Usage: node scenario.cjs ENDPOINT ACCESS_KEY SECRET_KEY BUCKET SMALL_FILE BIG_FILE PHASE
// PHASE "write-read" uploads and reads back; "delete" deletes what it wrote (the test reads the origin in between);
// "read-only" (with a reader's keys) reads readable/small.bin and tries to write beside it.
// (with NODE_PATH = the node_modules that `npm ci` made from this folder's package-lock.json)
//
// The SDK's defaults are kept: CRC32 request checksums (a header on a buffered body, an aws-chunked
// trailer on a streamed one) and response checksum validation on GetObject (x-amz-checksum-mode:
// ENABLED, the body checked against the checksum header of the answer, ranged answers included).
// A presigned POST of the small file is posted as a form with Node's fetch (to posted/js.bin).
// It prints one JSON object with what it saw; the test compares it with the origin. Any error
// ends it with exit 1 and the error on stderr.
"use strict";

const crypto = require("node:crypto");
const fs = require("node:fs");
const {
  S3Client, PutObjectCommand, GetObjectCommand, HeadObjectCommand, CopyObjectCommand,
  DeleteObjectsCommand, paginateListObjectsV2,
} = require("@aws-sdk/client-s3");
const { Upload } = require("@aws-sdk/lib-storage");
const { getSignedUrl } = require("@aws-sdk/s3-request-presigner");
const { createPresignedPost } = require("@aws-sdk/s3-presigned-post");

let step = "start";  // what it was doing, for the error message
const sha = (data) => crypto.createHash("sha256").update(data).digest("hex");

async function main() {
  const [endpoint, accessKeyId, secretAccessKey, Bucket, smallFile, bigFile, phase] = process.argv.slice(2);
  const small = fs.readFileSync(smallFile);
  const big = fs.readFileSync(bigFile);
  const s3 = new S3Client({
    endpoint, region: "us-east-1", forcePathStyle: true, maxAttempts: 1,
    credentials: { accessKeyId, secretAccessKey },
    requestHandler: { connectionTimeout: 5000, requestTimeout: 30000 },
  });
  const out = {};
  if (phase === "delete") {
    await remove(s3, Bucket, out);
  } else if (phase === "read-only") {
    await readOnly(s3, Bucket, small, out);
  } else if (phase === "write-read") {
    await writeRead(s3, Bucket, small, big, smallFile, bigFile, out);
  } else {
    throw new Error(`unknown phase ${phase}`);
  }
  console.log(JSON.stringify(out));
}

async function writeRead(s3, Bucket, small, big, smallFile, bigFile, out) {

  step = "PutObject";
  // PutObject of a buffer (CRC32 in a header) and of a file stream (aws-chunked, CRC32 trailer).
  const put = await s3.send(new PutObjectCommand({
    Bucket, Key: "js/small.bin", Body: small, ContentType: "application/x-small", Metadata: { origin: "js-sdk" },
  }));
  const streamed = await s3.send(new PutObjectCommand({
    Bucket, Key: "js/streamed.bin", Body: fs.createReadStream(smallFile), ContentLength: small.length,
  }));
  out.put = { etag: put.ETag, crc32: put.ChecksumCRC32 ?? null, streamed_etag: streamed.ETag };

  step = "Upload";
  // lib-storage's Upload: a multipart upload of 5 MiB parts, two at a time.
  const upload = new Upload({
    client: s3, params: { Bucket, Key: "js/dir/big.bin", Body: big }, partSize: 5 * 1024 * 1024, queueSize: 2,
  });
  const uploaded = await upload.done();
  // And of a file stream, its length unknown to lib-storage: multipart as well.
  const fromStream = await new Upload({
    client: s3, params: { Bucket, Key: "js/dir/stream-big.bin", Body: fs.createReadStream(bigFile) },
    partSize: 5 * 1024 * 1024, queueSize: 2,
  }).done();
  out.upload = { etag: uploaded.ETag, key: uploaded.Key, stream_etag: fromStream.ETag };

  // GetObject, whole and ranged, with the default response checksum validation.
  const read = async (Key, Range) => {
    step = `GetObject ${Key} ${Range ?? "whole"}`;
    const answer = await s3.send(new GetObjectCommand({ Bucket, Key, Range }));
    const body = Buffer.from(await answer.Body.transformToByteArray());
    return { body, answer };
  };
  // A ranged GET of an object never read before (the gateway has none of its blocks), then whole reads.
  const cold = await read("js/streamed.bin", "bytes=100-199");
  out.ranges = { "js/streamed.bin:100-199": { hex: cold.body.toString("hex"), content_range: cold.answer.ContentRange } };
  out.whole = {};
  for (const key of ["js/small.bin", "js/streamed.bin", "js/dir/big.bin", "js/dir/stream-big.bin"]) {
    out.whole[key] = sha((await read(key)).body);
  }
  const ranges = [[0, 99], [5 * 1024 * 1024 - 10, 5 * 1024 * 1024 + 9], [big.length - 7, big.length - 1]];
  for (const [start, end] of ranges) {
    const { body, answer } = await read("js/dir/big.bin", `bytes=${start}-${end}`);
    out.ranges[`js/dir/big.bin:${start}-${end}`] = { hex: body.toString("hex"), content_range: answer.ContentRange };
  }
  const smallRange = await read("js/small.bin", "bytes=10-29");
  out.ranges["js/small.bin:10-29"] = { hex: smallRange.body.toString("hex"), content_range: smallRange.answer.ContentRange };
  const suffix = await read("js/small.bin", "bytes=-5");
  out.ranges["js/small.bin:-5"] = { hex: suffix.body.toString("hex"), content_range: suffix.answer.ContentRange };

  step = "HeadObject";
  const head = await s3.send(new HeadObjectCommand({ Bucket, Key: "js/small.bin" }));
  out.head = { size: head.ContentLength, etag: head.ETag, content_type: head.ContentType, metadata: head.Metadata };
  // A missing key, as the SDK reports it.
  out.missing = {};
  for (const [name, command] of [["head", new HeadObjectCommand({ Bucket, Key: "js/missing.bin" })],
    ["get", new GetObjectCommand({ Bucket, Key: "js/missing.bin", Range: "bytes=0-9" })]]) {
    step = `${name} of a missing key`;
    try {
      await s3.send(command);
      out.missing[name] = "no error";
    } catch (error) {
      out.missing[name] = `${error.name} ${error.$metadata?.httpStatusCode}`;
    }
  }

  step = "CopyObject";
  const copied = await s3.send(new CopyObjectCommand({ Bucket, Key: "js/copy.bin", CopySource: `${Bucket}/js/small.bin` }));
  out.copy = { etag: copied.CopyObjectResult.ETag };
  out.whole["js/copy.bin"] = sha((await read("js/copy.bin")).body);

  step = "ListObjectsV2";
  // ListObjectsV2, two keys a page.
  out.pages = [];
  for await (const page of paginateListObjectsV2({ client: s3, pageSize: 2 }, { Bucket, Prefix: "js/" })) {
    out.pages.push((page.Contents ?? []).map((o) => `${o.Key}=${o.Size}`));
  }
  const delimited = [];
  for await (const page of paginateListObjectsV2({ client: s3, pageSize: 1 }, { Bucket, Prefix: "js/", Delimiter: "/" })) {
    delimited.push(...(page.Contents ?? []).map((o) => o.Key), ...(page.CommonPrefixes ?? []).map((p) => p.Prefix));
  }
  out.delimited = delimited;

  step = "presigned GET";
  // A presigned GET, fetched with Node's own fetch.
  const url = await getSignedUrl(s3, new GetObjectCommand({ Bucket, Key: "js/dir/big.bin" }), { expiresIn: 300 });
  const fetched = await fetch(url, { signal: AbortSignal.timeout(30000) });
  out.presigned = { status: fetched.status, sha: sha(Buffer.from(await fetched.arrayBuffer())),
    signed: url.includes("X-Amz-Signature=") };

  step = "presigned POST";
  // A presigned POST (@aws-sdk/s3-presigned-post), posted as a web page posts a form, with Node's
  // fetch and FormData, outside js/ (listed above): the test reads and removes it.
  const post = await createPresignedPost(s3, {
    Bucket, Key: "posted/${filename}", Expires: 300,
    Conditions: [["starts-with", "$key", "posted/"], ["content-length-range", 1, small.length],
      { "Content-Type": "application/x-posted" }, { success_action_status: "201" }],
    Fields: { "Content-Type": "application/x-posted", success_action_status: "201" },
  });
  const form = new FormData();
  for (const [name, value] of Object.entries(post.fields)) form.append(name, value);
  form.append("file", new Blob([small]), "js.bin");
  const posted = await fetch(post.url, { method: "POST", body: form, signal: AbortSignal.timeout(30000) });
  out.posted = { status: posted.status, etag: posted.headers.get("etag"), body: await posted.text() };
}

// As a user whose grants only let it read: a read of the small file, then a refused PutObject.
async function readOnly(s3, Bucket, small, out) {
  step = "GetObject as a reader";
  const answer = await s3.send(new GetObjectCommand({ Bucket, Key: "readable/small.bin" }));
  out.read = sha(Buffer.from(await answer.Body.transformToByteArray()));
  step = "PutObject as a reader";
  try {
    await s3.send(new PutObjectCommand({ Bucket, Key: "readable/denied.bin", Body: small }));
    out.put = "no error";
  } catch (error) {
    out.put = `${error.name} ${error.$metadata?.httpStatusCode}`;
  }
}

async function remove(s3, Bucket, out) {
  step = "DeleteObjects";
  const keys = ["js/small.bin", "js/streamed.bin", "js/dir/big.bin", "js/dir/stream-big.bin", "js/copy.bin"];
  const deleted = await s3.send(new DeleteObjectsCommand({
    Bucket, Delete: { Objects: keys.map((Key) => ({ Key })) },
  }));
  out.deleted = (deleted.Deleted ?? []).map((d) => d.Key).sort();
  out.delete_errors = (deleted.Errors ?? []).map((e) => `${e.Key}: ${e.Code}`);
  const left = [];
  for await (const page of paginateListObjectsV2({ client: s3 }, { Bucket, Prefix: "js/" })) {
    left.push(...(page.Contents ?? []).map((o) => o.Key));
  }
  out.left = left;
}

main().catch((error) => {
  console.error(`js-sdk scenario, at ${step}: ${error.name}: ${error.message}`);
  if (error.$metadata) console.error(JSON.stringify(error.$metadata));
  if (error.$response) console.error(`status ${error.$response.statusCode} ${JSON.stringify(error.$response.headers)}`);
  console.error(error.stack);
  process.exit(1);
});
