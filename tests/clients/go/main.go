// The minio-go scenario of tests/integration/test_sdk_clients.py, run against the gateway.
//
// Usage: scenario ENDPOINT ACCESS_KEY SECRET_KEY BUCKET SMALL_FILE BIG_FILE PHASE [trailing-headers]
//
// "trailing-headers" sets minio-go's Options.TrailingHeaders, as MinIO's own mc sets it: uploads
// then carry CRC32C checksums (per part, and the composite one on CompleteMultipartUpload).
//
// It uploads the two files as minio-go uploads them (PutObject of known size, single PUT and
// multipart; PutObject of unknown size, a multipart upload whose CompleteMultipartUpload carries
// the object's composite x-amz-checksum-crc32c), reads them back (whole, ranged, StatObject,
// ListObjects in pages, a presigned GET), and posts the small file as an HTML form would, with a
// policy from PresignedPostPolicy (content type, user metadata, a length range and a CRC32C
// checksum field): PHASE "write-read". PHASE "delete" removes them with
// RemoveObjects (the test reads the origin in between). Each prints one JSON object with what it
// saw: the test compares it with the origin. Any error ends it with exit 1.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

const partSize = 5 * 1024 * 1024

// step is what the scenario is doing, for the error message.
var step = "start"

func must[T any](value T, err error) T {
	if err != nil {
		fail(err)
	}
	return value
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "minio-go scenario, at %s: %v\n", step, err)
	os.Exit(1)
}

func sha(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// onlyReader hides everything but Read, so minio-go cannot find out the size (no Seek, no Stat).
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func main() {
	if len(os.Args) != 8 && (len(os.Args) != 9 || os.Args[8] != "trailing-headers") {
		fail(fmt.Errorf("usage: scenario ENDPOINT ACCESS_KEY SECRET_KEY BUCKET SMALL_FILE BIG_FILE PHASE [trailing-headers]"))
	}
	endpoint := must(url.Parse(os.Args[1]))
	key, secret, bucket := os.Args[2], os.Args[3], os.Args[4]
	small := must(os.ReadFile(os.Args[5]))
	big := must(os.ReadFile(os.Args[6]))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()

	client := must(minio.New(endpoint.Host, &minio.Options{
		Creds:           credentials.NewStaticV4(key, secret, ""),
		Secure:          endpoint.Scheme == "https",
		Region:          "us-east-1",
		BucketLookup:    minio.BucketLookupPath,
		MaxRetries:      1,
		TrailingHeaders: len(os.Args) == 9,
	}))

	out := map[string]any{}
	switch os.Args[7] {
	case "write-read":
		writeRead(ctx, client, bucket, small, big, out)
	case "delete":
		remove(ctx, client, bucket, out)
	default:
		fail(fmt.Errorf("unknown phase %q", os.Args[7]))
	}
	line := must(json.Marshal(out))
	fmt.Println(string(line))
}

func writeRead(ctx context.Context, client *minio.Client, bucket string, small, big []byte, out map[string]any) {
	uploads := map[string]map[string]any{}
	record := func(name string, info minio.UploadInfo) {
		uploads[name] = map[string]any{"etag": info.ETag, "size": info.Size, "crc32c": info.ChecksumCRC32C}
	}
	step = "PutObject unknown size (-1), multipart"
	// Unknown size (-1): a streamed multipart upload, CompleteMultipartUpload with x-amz-checksum-crc32c.
	record("unknown-big", must(client.PutObject(ctx, bucket, "minio/unknown/big.bin", onlyReader{bytes.NewReader(big)},
		-1, minio.PutObjectOptions{PartSize: partSize})))
	step = "PutObject known size, small"
	// Known size below the part size: one PutObject.
	record("known-small", must(client.PutObject(ctx, bucket, "minio/known-small.bin", bytes.NewReader(small),
		int64(len(small)), minio.PutObjectOptions{ContentType: "application/x-small", PartSize: partSize})))
	step = "PutObject known size, multipart"
	// Known size above it: a multipart upload of parts of known length.
	record("known-big", must(client.PutObject(ctx, bucket, "minio/known-big.bin", bytes.NewReader(big),
		int64(len(big)), minio.PutObjectOptions{PartSize: partSize})))
	out["uploads"] = uploads

	// Whole reads, with the checksum mode on (minio-go checks a full-object checksum it is given).
	whole := map[string]string{}
	for _, name := range []string{"minio/known-small.bin", "minio/known-big.bin", "minio/unknown/big.bin"} {
		step = "GetObject whole " + name
		opts := minio.GetObjectOptions{Checksum: true}
		obj := must(client.GetObject(ctx, bucket, name, opts))
		whole[name] = sha(must(io.ReadAll(obj)))
		obj.Close()
	}
	out["whole"] = whole

	// Ranged reads.
	ranges := map[string]string{}
	for _, r := range [][2]int64{{0, 99}, {5*1024*1024 - 10, 5*1024*1024 + 9}, {int64(len(big)) - 7, int64(len(big)) - 1}} {
		for _, name := range []string{"minio/known-big.bin", "minio/unknown/big.bin"} {
			step = fmt.Sprintf("GetObject %s range %d-%d", name, r[0], r[1])
			opts := minio.GetObjectOptions{}
			if err := opts.SetRange(r[0], r[1]); err != nil {
				fail(err)
			}
			obj := must(client.GetObject(ctx, bucket, name, opts))
			ranges[fmt.Sprintf("%s:%d-%d", name, r[0], r[1])] = hex.EncodeToString(must(io.ReadAll(obj)))
			obj.Close()
		}
	}
	out["ranges"] = ranges

	step = "StatObject"
	stat := must(client.StatObject(ctx, bucket, "minio/known-small.bin", minio.StatObjectOptions{}))
	out["stat"] = map[string]any{"size": stat.Size, "etag": stat.ETag, "content_type": stat.ContentType}

	step = "ListObjects"
	// ListObjects, two keys a page, recursive and not.
	listed := []string{}
	for info := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "minio/", Recursive: true, MaxKeys: 2}) {
		if info.Err != nil {
			fail(info.Err)
		}
		listed = append(listed, fmt.Sprintf("%s=%d", info.Key, info.Size))
	}
	out["listed"] = listed
	top := []string{}
	for info := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "minio/", MaxKeys: 1}) {
		if info.Err != nil {
			fail(info.Err)
		}
		top = append(top, info.Key)
	}
	out["top"] = top

	step = "presigned GET"
	// A presigned GET, fetched with a plain HTTP client.
	presigned := must(client.PresignedGetObject(ctx, bucket, "minio/known-small.bin", 5*time.Minute, nil))
	response := must(http.Get(presigned.String()))
	body := must(io.ReadAll(response.Body))
	response.Body.Close()
	out["presigned"] = map[string]any{"status": response.StatusCode, "sha": sha(body),
		"signed": strings.Contains(presigned.RawQuery, "X-Amz-Signature=")}

	out["posted"] = postForm(ctx, client, bucket, small)
}

// postForm uploads data to minio/posted.bin with a presigned POST policy, as a browser form
// posts it (the policy's fields first, the file last), with net/http.
func postForm(ctx context.Context, client *minio.Client, bucket string, data []byte) map[string]any {
	step = "presigned POST policy"
	policy := minio.NewPostPolicy()
	crc := minio.ChecksumCRC32C.Hasher()
	crc.Write(data)
	for _, err := range []error{
		policy.SetBucket(bucket), policy.SetKey("minio/posted.bin"), policy.SetExpires(time.Now().Add(5 * time.Minute)),
		policy.SetContentType("application/x-posted"), policy.SetUserMetadata("origin", "minio-go"),
		policy.SetContentLengthRange(1, int64(len(data))), policy.SetChecksum(minio.NewChecksum(minio.ChecksumCRC32C, crc.Sum(nil))),
	} {
		if err != nil {
			fail(err)
		}
	}
	target, fields := must2(client.PresignedPostPolicy(ctx, policy))
	step = "POST the form"
	var form bytes.Buffer
	writer := multipart.NewWriter(&form)
	for name, value := range fields {
		if err := writer.WriteField(name, value); err != nil {
			fail(err)
		}
	}
	part := must(writer.CreateFormFile("file", "posted.bin"))
	must(part.Write(data))
	if err := writer.Close(); err != nil {
		fail(err)
	}
	response := must(http.Post(target.String(), writer.FormDataContentType(), &form))
	answer := must(io.ReadAll(response.Body))
	response.Body.Close()
	return map[string]any{"status": response.StatusCode, "etag": response.Header.Get("ETag"), "error": string(answer)}
}

func must2[A, B any](a A, b B, err error) (A, B) {
	if err != nil {
		fail(err)
	}
	return a, b
}

func remove(ctx context.Context, client *minio.Client, bucket string, out map[string]any) {
	step = "RemoveObjects"
	// RemoveObjects: one DeleteObjects request with every key listed.
	toRemove := make(chan minio.ObjectInfo)
	go func() {
		defer close(toRemove)
		for info := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "minio/", Recursive: true}) {
			if info.Err != nil {
				fail(info.Err)
			}
			toRemove <- info
		}
	}()
	removeErrors := []string{}
	for e := range client.RemoveObjects(ctx, bucket, toRemove, minio.RemoveObjectsOptions{}) {
		removeErrors = append(removeErrors, fmt.Sprintf("%s: %v", e.ObjectName, e.Err))
	}
	out["remove_errors"] = removeErrors
	left := []string{}
	for info := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Prefix: "minio/", Recursive: true}) {
		if info.Err != nil {
			fail(info.Err)
		}
		left = append(left, info.Key)
	}
	sort.Strings(left)
	out["left"] = left
}
