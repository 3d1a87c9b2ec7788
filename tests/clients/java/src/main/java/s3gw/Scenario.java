package s3gw;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import software.amazon.awssdk.auth.credentials.AwsBasicCredentials;
import software.amazon.awssdk.auth.credentials.StaticCredentialsProvider;
import software.amazon.awssdk.awscore.retry.AwsRetryStrategy;
import software.amazon.awssdk.core.ResponseBytes;
import software.amazon.awssdk.core.interceptor.Context;
import software.amazon.awssdk.core.interceptor.ExecutionAttributes;
import software.amazon.awssdk.core.interceptor.ExecutionInterceptor;
import software.amazon.awssdk.core.interceptor.SdkExecutionAttribute;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.http.apache.ApacheHttpClient;
import software.amazon.awssdk.regions.Region;
import software.amazon.awssdk.services.s3.S3Client;
import software.amazon.awssdk.services.s3.S3Configuration;
import software.amazon.awssdk.services.s3.model.ChecksumAlgorithm;
import software.amazon.awssdk.services.s3.model.ChecksumMode;
import software.amazon.awssdk.services.s3.model.CompletedMultipartUpload;
import software.amazon.awssdk.services.s3.model.CompletedPart;
import software.amazon.awssdk.services.s3.model.CopyObjectResponse;
import software.amazon.awssdk.services.s3.model.CreateMultipartUploadResponse;
import software.amazon.awssdk.services.s3.model.Delete;
import software.amazon.awssdk.services.s3.model.DeleteObjectsResponse;
import software.amazon.awssdk.services.s3.model.GetObjectRequest;
import software.amazon.awssdk.services.s3.model.GetObjectResponse;
import software.amazon.awssdk.services.s3.model.HeadObjectResponse;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Request;
import software.amazon.awssdk.services.s3.model.ListObjectsV2Response;
import software.amazon.awssdk.services.s3.model.ObjectIdentifier;
import software.amazon.awssdk.services.s3.model.PutObjectResponse;
import software.amazon.awssdk.services.s3.model.S3Exception;
import software.amazon.awssdk.services.s3.model.UploadPartResponse;
import software.amazon.awssdk.services.s3.presigner.S3Presigner;

/**
 * The AWS SDK for Java v2 scenario of tests/integration/test_sdk_clients.py, run against the gateway.
 *
 * <p>Usage: {@code java -cp 'scenario.jar:lib/*' s3gw.Scenario ENDPOINT ACCESS_KEY SECRET_KEY BUCKET SMALL_FILE BIG_FILE PHASE}
 * PHASE {@code write-read} uploads and reads back; {@code delete} deletes what it wrote (the test reads the
 * origin in between); {@code read-only} (with a reader's keys) reads readable/small.bin and tries to write beside it.
 *
 * <p>The synchronous client as Trino's native S3 file system and Hadoop S3A configure it: endpoint
 * override, path-style access, us-east-1, the SDK's default checksums (CRC32 on requests, a trailer
 * on streamed bodies; response validation on GetObject). It prints one JSON object with what it saw
 * and the headers each request carried; the test compares it with the origin. Any error ends it
 * with exit 1 and the stack trace on stderr.
 */
public final class Scenario {
    private static final int PART = 5 * 1024 * 1024;

    /** operation name -> the request headers worth checking, of each request sent. */
    private static final Map<String, List<Map<String, String>>> SENT = Collections.synchronizedMap(new LinkedHashMap<>());

    private static final List<String> SHOWN = List.of("content-encoding", "transfer-encoding", "x-amz-content-sha256",
            "x-amz-trailer", "x-amz-decoded-content-length", "content-length", "x-amz-checksum-crc32",
            "x-amz-checksum-algorithm", "x-amz-checksum-mode", "x-amz-sdk-checksum-algorithm", "range");

    private Scenario() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 7) {
            throw new IllegalArgumentException("usage: Scenario ENDPOINT ACCESS_KEY SECRET_KEY BUCKET SMALL_FILE BIG_FILE PHASE");
        }
        URI endpoint = URI.create(args[0]);
        StaticCredentialsProvider credentials = StaticCredentialsProvider.create(AwsBasicCredentials.create(args[1], args[2]));
        String bucket = args[3];
        Path smallFile = Path.of(args[4]);
        byte[] small = Files.readAllBytes(smallFile);
        byte[] big = Files.readAllBytes(Path.of(args[5]));

        ExecutionInterceptor recorder = new ExecutionInterceptor() {
            @Override
            public void beforeTransmission(Context.BeforeTransmission context, ExecutionAttributes attributes) {
                Map<String, String> seen = new LinkedHashMap<>();
                context.httpRequest().headers().forEach((name, values) -> {
                    if (SHOWN.contains(name.toLowerCase())) {
                        seen.put(name.toLowerCase(), String.join(",", values));
                    }
                });
                String operation = attributes.getAttribute(SdkExecutionAttribute.OPERATION_NAME);
                SENT.computeIfAbsent(operation, k -> Collections.synchronizedList(new ArrayList<>())).add(seen);
            }
        };
        Map<String, Object> out = new LinkedHashMap<>();
        try (S3Client s3 = S3Client.builder()
                .endpointOverride(endpoint)
                .region(Region.US_EAST_1)
                .credentialsProvider(credentials)
                .forcePathStyle(true)
                .httpClientBuilder(ApacheHttpClient.builder()
                        .connectionTimeout(Duration.ofSeconds(5)).socketTimeout(Duration.ofSeconds(30)))
                .overrideConfiguration(o -> o.retryStrategy(AwsRetryStrategy.doNotRetry())
                        .apiCallTimeout(Duration.ofSeconds(50)).addExecutionInterceptor(recorder))
                .build()) {
            switch (args[6]) {
                case "write-read" -> writeRead(s3, credentials, endpoint, bucket, smallFile, small, big, out);
                case "delete" -> delete(s3, bucket, out);
                case "read-only" -> readOnly(s3, bucket, small, out);
                default -> throw new IllegalArgumentException("unknown phase " + args[6]);
            }
        }
        out.put("sent", SENT);
        System.out.println(json(out));
    }

    private static void writeRead(S3Client s3, StaticCredentialsProvider credentials, URI endpoint, String bucket,
                            Path smallFile, byte[] small, byte[] big, Map<String, Object> out) throws Exception {
        // PutObject of bytes (the CRC32 in a header), then streamed bodies: a stream of known length,
        // and a content provider of unknown length (aws-chunked with the checksum in a trailer).
        PutObjectResponse plain = s3.putObject(b -> b.bucket(bucket).key("java/small.bin")
                .contentType("application/x-small").metadata(Map.of("origin", "java-sdk")), RequestBody.fromBytes(small));
        PutObjectResponse known = s3.putObject(b -> b.bucket(bucket).key("java/known-stream.bin"),
                RequestBody.fromInputStream(Files.newInputStream(smallFile), small.length));
        PutObjectResponse unknown = s3.putObject(b -> b.bucket(bucket).key("java/unknown-stream.bin"),
                RequestBody.fromContentProvider(() -> new ByteArrayInputStream(big), "application/octet-stream"));
        out.put("put", map("plain", plain.eTag(), "plain_crc32", plain.checksumCRC32(), "known_stream", known.eTag(),
                "unknown_stream", unknown.eTag()));

        // A multipart upload of 5 MiB parts with CRC32 part checksums, as the SDK's callers do it.
        CreateMultipartUploadResponse created = s3.createMultipartUpload(b -> b.bucket(bucket).key("java/dir/big.bin")
                .checksumAlgorithm(ChecksumAlgorithm.CRC32));
        List<CompletedPart> parts = new ArrayList<>();
        for (int start = 0, number = 1; start < big.length; start += PART, number++) {
            byte[] chunk = Arrays.copyOfRange(big, start, Math.min(big.length, start + PART));
            int partNumber = number;
            UploadPartResponse part = s3.uploadPart(b -> b.bucket(bucket).key("java/dir/big.bin")
                    .uploadId(created.uploadId()).partNumber(partNumber).checksumAlgorithm(ChecksumAlgorithm.CRC32),
                    RequestBody.fromBytes(chunk));
            parts.add(CompletedPart.builder().partNumber(partNumber).eTag(part.eTag()).checksumCRC32(part.checksumCRC32()).build());
        }
        String multipartEtag = s3.completeMultipartUpload(b -> b.bucket(bucket).key("java/dir/big.bin")
                .uploadId(created.uploadId()).multipartUpload(CompletedMultipartUpload.builder().parts(parts).build())).eTag();
        out.put("multipart", map("etag", multipartEtag, "parts", parts.size()));

        // GetObject with checksum validation on: whole, and HEAD then ranged GETs as S3A and Trino read.
        Map<String, Object> whole = new LinkedHashMap<>();
        for (String key : List.of("java/small.bin", "java/known-stream.bin", "java/unknown-stream.bin", "java/dir/big.bin")) {
            whole.put(key, sha(get(s3, bucket, key, null).asByteArray()));
        }
        out.put("whole", whole);
        HeadObjectResponse head = s3.headObject(b -> b.bucket(bucket).key("java/dir/big.bin"));
        long size = head.contentLength();
        Map<String, Object> ranges = new LinkedHashMap<>();
        long[][] wanted = {{0, 99}, {PART - 10, PART + 9}, {size - 7, size - 1}};
        for (long[] range : wanted) {
            ResponseBytes<GetObjectResponse> got = get(s3, bucket, "java/dir/big.bin", "bytes=" + range[0] + "-" + range[1]);
            ranges.put("java/dir/big.bin:" + range[0] + "-" + range[1],
                    map("hex", HexFormat.of().formatHex(got.asByteArray()), "content_range", got.response().contentRange()));
        }
        ResponseBytes<GetObjectResponse> smallRange = get(s3, bucket, "java/small.bin", "bytes=10-29");
        ranges.put("java/small.bin:10-29", map("hex", HexFormat.of().formatHex(smallRange.asByteArray()),
                "content_range", smallRange.response().contentRange()));
        out.put("ranges", ranges);

        // Many ranged GETs at once, as an engine reads a split: 1 MiB ranges on 6 threads, put back together.
        int step = 1024 * 1024;
        List<Future<byte[]>> pieces = new ArrayList<>();
        ExecutorService pool = Executors.newFixedThreadPool(6);
        try {
            for (long start = 0; start < size; start += step) {
                String range = "bytes=" + start + "-" + (Math.min(size, start + step) - 1);
                pieces.add(pool.submit(() -> get(s3, bucket, "java/dir/big.bin", range).asByteArray()));
            }
            ByteArrayOutputStream joined = new ByteArrayOutputStream();
            for (Future<byte[]> piece : pieces) {
                joined.writeBytes(piece.get(50, TimeUnit.SECONDS));
            }
            out.put("parallel", map("ranges", pieces.size(), "sha", sha(joined.toByteArray())));
        } finally {
            pool.shutdownNow();
        }

        HeadObjectResponse smallHead = s3.headObject(b -> b.bucket(bucket).key("java/small.bin"));
        out.put("head", map("size", smallHead.contentLength(), "etag", smallHead.eTag(),
                "content_type", smallHead.contentType(), "metadata", smallHead.metadata(), "big_size", size));

        // A missing key, as the SDK reports it (Trino and S3A turn these into "file not found").
        Map<String, Object> missing = new LinkedHashMap<>();
        try {
            s3.headObject(b -> b.bucket(bucket).key("java/missing.bin"));
        } catch (S3Exception e) {
            missing.put("head", e.getClass().getSimpleName() + " " + e.statusCode());
        }
        try {
            get(s3, bucket, "java/missing.bin", "bytes=0-9");
        } catch (S3Exception e) {
            missing.put("get", e.getClass().getSimpleName() + " " + e.statusCode() + " " + e.awsErrorDetails().errorCode());
        }
        out.put("missing", missing);

        CopyObjectResponse copied = s3.copyObject(b -> b.sourceBucket(bucket).sourceKey("java/small.bin")
                .destinationBucket(bucket).destinationKey("java/copy.bin"));
        out.put("copy", map("etag", copied.copyObjectResult().eTag()));
        whole.put("java/copy.bin", sha(get(s3, bucket, "java/copy.bin", null).asByteArray()));

        // ListObjectsV2, two keys a page; and delimited, one entry a page.
        List<Object> pages = new ArrayList<>();
        for (ListObjectsV2Response page : s3.listObjectsV2Paginator(ListObjectsV2Request.builder()
                .bucket(bucket).prefix("java/").maxKeys(2).build())) {
            pages.add(page.contents().stream().map(o -> o.key() + "=" + o.size()).toList());
        }
        out.put("pages", pages);
        List<Object> delimited = new ArrayList<>();
        for (ListObjectsV2Response page : s3.listObjectsV2Paginator(ListObjectsV2Request.builder()
                .bucket(bucket).prefix("java/").delimiter("/").maxKeys(1).build())) {
            page.contents().forEach(o -> delimited.add(o.key()));
            page.commonPrefixes().forEach(p -> delimited.add(p.prefix()));
        }
        out.put("delimited", delimited);

        // A presigned GET, fetched with the JDK's HTTP client.
        try (S3Presigner presigner = S3Presigner.builder().endpointOverride(endpoint).region(Region.US_EAST_1)
                .credentialsProvider(credentials)
                .serviceConfiguration(S3Configuration.builder().pathStyleAccessEnabled(true).build()).build()) {
            URI url = presigner.presignGetObject(p -> p.signatureDuration(Duration.ofMinutes(5))
                    .getObjectRequest(g -> g.bucket(bucket).key("java/dir/big.bin"))).url().toURI();
            HttpResponse<byte[]> fetched = HttpClient.newHttpClient().send(
                    HttpRequest.newBuilder(url).timeout(Duration.ofSeconds(30)).build(), HttpResponse.BodyHandlers.ofByteArray());
            out.put("presigned", map("status", fetched.statusCode(), "sha", sha(fetched.body()),
                    "signed", url.getRawQuery().contains("X-Amz-Signature=")));
        }
    }

    /** As a user whose grants only let it read: a read of the small file, then a refused PutObject. */
    private static void readOnly(S3Client s3, String bucket, byte[] small, Map<String, Object> out) throws Exception {
        out.put("read", sha(get(s3, bucket, "readable/small.bin", null).asByteArray()));
        try {
            s3.putObject(b -> b.bucket(bucket).key("readable/denied.bin"), RequestBody.fromBytes(small));
            out.put("put", "no error");
        } catch (S3Exception e) {
            out.put("put", e.getClass().getSimpleName() + " " + e.statusCode() + " " + e.awsErrorDetails().errorCode());
        }
    }

    private static void delete(S3Client s3, String bucket, Map<String, Object> out) {
        List<ObjectIdentifier> keys = new ArrayList<>();
        for (String key : List.of("java/small.bin", "java/known-stream.bin", "java/unknown-stream.bin", "java/dir/big.bin",
                "java/copy.bin")) {
            keys.add(ObjectIdentifier.builder().key(key).build());
        }
        DeleteObjectsResponse deleted = s3.deleteObjects(b -> b.bucket(bucket).delete(Delete.builder().objects(keys).build()));
        out.put("deleted", deleted.deleted().stream().map(d -> d.key()).sorted().toList());
        out.put("delete_errors", deleted.errors().stream().map(e -> e.key() + ": " + e.code()).toList());
        List<Object> left = new ArrayList<>();
        for (ListObjectsV2Response page : s3.listObjectsV2Paginator(b -> b.bucket(bucket).prefix("java/"))) {
            page.contents().forEach(o -> left.add(o.key()));
        }
        out.put("left", left);
    }

    private static ResponseBytes<GetObjectResponse> get(S3Client s3, String bucket, String key, String range) {
        GetObjectRequest.Builder request = GetObjectRequest.builder().bucket(bucket).key(key).checksumMode(ChecksumMode.ENABLED);
        if (range != null) {
            request.range(range);
        }
        return s3.getObjectAsBytes(request.build());
    }

    private static String sha(byte[] data) throws Exception {
        return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
    }

    private static Map<String, Object> map(Object... pairs) {
        Map<String, Object> result = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            result.put((String) pairs[i], pairs[i + 1]);
        }
        return result;
    }

    /** A JSON text of maps, lists, strings, numbers, booleans and nulls. */
    private static String json(Object value) {
        if (value == null) {
            return "null";
        }
        if (value instanceof Number || value instanceof Boolean) {
            return value.toString();
        }
        if (value instanceof Map<?, ?> m) {
            List<String> items = new ArrayList<>();
            synchronized (m) {
                m.forEach((k, v) -> items.add(json(String.valueOf(k)) + ":" + json(v)));
            }
            return "{" + String.join(",", items) + "}";
        }
        if (value instanceof List<?> l) {
            List<String> items = new ArrayList<>();
            synchronized (l) {
                l.forEach(v -> items.add(json(v)));
            }
            return "[" + String.join(",", items) + "]";
        }
        StringBuilder s = new StringBuilder("\"");
        for (char c : value.toString().toCharArray()) {
            switch (c) {
                case '"' -> s.append("\\\"");
                case '\\' -> s.append("\\\\");
                default -> {
                    if (c < 0x20) {
                        s.append(String.format("\\u%04x", (int) c));
                    } else {
                        s.append(c);
                    }
                }
            }
        }
        return s.append('"').toString();
    }
}
