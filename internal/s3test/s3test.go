// Package s3test runs a real S3-compatible object store for tests:
// SeaweedFS's weed (built by .ci/run at a pinned version), with one
// identity, on loopback ports of its own.
package s3test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/minio/minio-go/v7/pkg/signer"

	"github.com/mediaship/engine/internal/testtool"
)

// Store is a running object store.
type Store struct {
	Addr              string // host:port of its S3 endpoint
	AccessKey, Secret string
	Region            string
}

// Start runs weed with an S3 gateway until the test ends, and returns
// once the gateway answers.
func Start(t testing.TB) *Store {
	t.Helper()
	bin := testtool.Require(t, "weed")
	dir := t.TempDir()
	s := &Store{AccessKey: "AKIDENGINETEST", Secret: "c2VjcmV0LWtleS1mb3ItdGVzdHMtb25seQ", Region: "us-east-1"}
	conf := filepath.Join(dir, "s3.json")
	os.WriteFile(conf, []byte(fmt.Sprintf(`{"identities":[{"name":"engine","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List"]}]}`, s.AccessKey, s.Secret)), 0o600)
	ports := freePorts(t, 8)
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	cmd := exec.Command(bin, "server", "-dir="+filepath.Join(dir, "data"), "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port="+ports[0], "-master.port.grpc="+ports[1], "-volume.port="+ports[2], "-volume.port.grpc="+ports[3],
		"-filer", "-filer.port="+ports[4], "-filer.port.grpc="+ports[5], "-filer.localSocket="+filepath.Join(dir, "filer.sock"),
		"-s3", "-s3.port="+ports[6], "-s3.port.grpc="+ports[7], "-s3.localSocket="+filepath.Join(dir, "s3.sock"),
		"-s3.port.iceberg=0", "-s3.port.lance=0", "-s3.config="+conf, "-master.volumeSizeLimitMB=1024", "-volume.max=0")
	logf, err := os.Create(filepath.Join(dir, "weed.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill() // one process: master, volume server, filer and gateway
		<-exited
		logf.Close()
	})
	s.Addr = "127.0.0.1:" + ports[6]
	// Up once a bucket can be made: the gateway answers before the filer
	// and the volume server are ready for it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("weed exited:\n%s", tail(b))
		default:
		}
		if err := s.MakeBucket("ready"); err == nil {
			return s
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("weed's S3 gateway was not ready within 60 s:\n%s", tail(b))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func tail(b []byte) []byte {
	if len(b) > 4000 {
		return b[len(b)-4000:]
	}
	return b
}

// freePorts returns n loopback ports free now.
func freePorts(t testing.TB, n int) []string {
	var ls []net.Listener
	var ports []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, strconv.Itoa(l.Addr().(*net.TCPAddr).Port))
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// Do sends a request signed with the store's identity: method on path
// (/bucket/key), with body and the fields in hdr.
func (s *Store) Do(method, path string, body []byte, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequest(method, "http://"+s.Addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	sum := sha256.Sum256(body)
	req.Header.Set("X-Amz-Content-Sha256", hex.EncodeToString(sum[:]))
	req = signer.SignV4(*req, s.AccessKey, s.Secret, "", s.Region)
	return (&http.Client{Timeout: 60 * time.Second}).Do(req)
}

// MakeBucket creates a bucket.
func (s *Store) MakeBucket(name string) error {
	resp, err := s.Do("PUT", "/"+name, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 && !bytes.Contains(b, []byte("BucketAlreadyOwnedByYou")) {
		return fmt.Errorf("make bucket %s: %s: %s", name, resp.Status, b)
	}
	return nil
}

// Put stores an object, with its SHA-256 as its checksum (which the
// store gives back as x-amz-checksum-sha256).
func (s *Store) Put(t testing.TB, bucket, key string, body []byte) {
	t.Helper()
	sum := sha256.Sum256(body)
	resp, err := s.Do("PUT", "/"+bucket+"/"+key, body, http.Header{"X-Amz-Checksum-Sha256": {base64.StdEncoding.EncodeToString(sum[:])}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("put %s/%s: %s: %s", bucket, key, resp.Status, b)
	}
}
