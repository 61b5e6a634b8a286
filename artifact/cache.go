package artifact

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/toolerr"
)

// cache is the on-disk, content-addressed blob store shared by every
// sandboxd process that names the same directory:
//
//	<root>/blobs/sha256/<hex>              verified blobs (manifests, configs, layers, modules)
//	<root>/modules/sha256/<manifest>/<key> the digest of a module found inside image layers
//	<root>/tmp/                            downloads in progress
//
// A file reaches blobs/ only by rename after its bytes were verified
// against its digest, so a failed download never leaves a partial blob
// under a final name. The data is fsynced before the rename only with
// fsync set: readers verify every blob anyway, so a blob a power loss
// truncated is found, removed and fetched again.
type cache struct {
	root  string
	fsync bool
}

// openCache creates root (mode 0700) with its subdirectories and refuses a
// directory that other users could write to or that another user owns.
func openCache(root string, fsync bool) (*cache, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactRefused, err, "artifact cache directory")
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot create the artifact cache directory")
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "artifact cache directory")
	}
	if !st.IsDir() {
		return nil, toolerr.New(toolerr.ArtifactRefused, "artifact cache %s is not a directory", abs)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, toolerr.New(toolerr.ArtifactRefused, "artifact cache directory %s is writable by other users (mode %v); refusing to run code from it", abs, st.Mode().Perm())
	}
	if err := checkOwner(abs, st); err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactRefused, err, "")
	}
	c := &cache{root: abs, fsync: fsync}
	for _, d := range []string{c.dir("blobs", "sha256"), c.dir("blobs", "sha512"), c.dir("modules", "sha256"), c.dir("modules", "sha512"), c.dir("tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot create the artifact cache directory")
		}
	}
	c.sweep(24 * time.Hour)
	return c, nil
}

func (c *cache) dir(parts ...string) string {
	return filepath.Join(append([]string{c.root}, parts...)...)
}

// blobPath is where the blob with digest d lives. d must have passed checkDigest.
func (c *cache) blobPath(d string) string {
	alg, hexPart := digestParts(d)
	return c.dir("blobs", alg, hexPart)
}

// sweep removes temporary files older than age: leftovers of processes that
// died mid-download. Younger ones may belong to a live download.
func (c *cache) sweep(age time.Duration) {
	ents, err := os.ReadDir(c.dir("tmp"))
	if err != nil {
		return
	}
	for _, e := range ents {
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > age {
			_ = os.Remove(filepath.Join(c.dir("tmp"), e.Name()))
		}
	}
}

// has reports whether a blob with digest d and size size is cached. It does
// not read the bytes; openBlob verifies them.
func (c *cache) has(d string, size int64) bool {
	st, err := os.Stat(c.blobPath(d))
	return err == nil && st.Mode().IsRegular() && (size < 0 || st.Size() == size)
}

// openBlob opens a cached blob as a reader that verifies size and digest as
// it is read. errNotCached means the blob is absent or has the wrong size
// (it is removed, so it is fetched again).
func (c *cache) openBlob(d string, size int64) (io.ReadCloser, error) {
	p := c.blobPath(d)
	f, err := OpenRegular(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errNotCached
		}
		if errors.Is(err, ErrNotRegular) {
			_ = os.Remove(p) // not ours: fetch the blob again
			return nil, errNotCached
		}
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot read the artifact cache")
	}
	st, err := f.Stat()
	if err != nil || (size >= 0 && st.Size() != size) {
		f.Close()
		_ = os.Remove(p)
		return nil, errNotCached
	}
	touch(p, st.ModTime())
	// A blob that fails verification is removed, so the next read fetches it again.
	return &verifier{r: f, c: f, digest: d, size: st.Size(), h: digestHash(d), what: "cached blob", onFail: func() { os.Remove(p) }}, nil
}

// openVerified opens a blob this process has just written and verified
// (cache.write hashed it while it streamed in): only its length is
// checked, its bytes are not hashed again.
func (c *cache) openVerified(d string, size int64) (io.ReadCloser, error) {
	f, err := OpenRegular(c.blobPath(d))
	if err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot read the artifact cache")
	}
	if st, err := f.Stat(); err != nil || size >= 0 && st.Size() != size {
		f.Close()
		return c.openBlob(d, size) // replaced meanwhile: verify whatever is there
	}
	return f, nil
}

// readBlob returns a cached blob's bytes after verifying them. A blob that
// fails verification is removed and reported as errNotCached.
func (c *cache) readBlob(d string, size int64) ([]byte, error) {
	rc, err := c.openBlob(d, size)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		_ = os.Remove(c.blobPath(d))
		return nil, errNotCached
	}
	return b, nil
}

var errNotCached = errors.New("not cached")

// write streams r into the cache as the blob d of exactly size bytes (size < 0:
// unknown, capped by max). The bytes are hashed while copied, fsynced, checked
// and only then renamed into place. progress, when set, is called with the
// bytes written so far.
func (c *cache) write(d string, size, max int64, r io.Reader, progress func(int64)) error {
	limit := max
	if size >= 0 {
		limit = size
	}
	return c.store(d, size, max, &verifier{r: io.LimitReader(r, limit+1), digest: d, size: size, h: digestHash(d), what: "blob"}, progress)
}

// store writes src (already verifying, or known to be blob d) into place.
func (c *cache) store(d string, size, max int64, src io.Reader, progress func(int64)) error {
	_, hexPart := digestParts(d)
	tmp, err := os.CreateTemp(c.dir("tmp"), hexPart[:16]+".*")
	if err != nil {
		return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write to the artifact cache")
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	// The file is written in pieces of at most writeChunk bytes (see
	// chunkWriter), through a buffer of that size when src is a stream.
	var dst io.Writer = chunkWriter{tmp}
	if progress != nil {
		dst = &progressWriter{w: dst, fn: progress}
	}
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(dst, src, *buf)
	copyBufs.Put(buf)
	if err != nil {
		return err
	}
	if size < 0 && n > max {
		return toolerr.New(toolerr.ArtifactRefused, "blob %s is larger than the %d-byte cap", d, max)
	}
	if c.fsync {
		if err := tmp.Sync(); err != nil {
			return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write to the artifact cache")
		}
	}
	if err := tmp.Close(); err != nil {
		return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write to the artifact cache")
	}
	if err := os.Rename(tmp.Name(), c.blobPath(d)); err != nil {
		return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write to the artifact cache")
	}
	ok = true
	if c.fsync {
		syncDir(filepath.Dir(c.blobPath(d)))
	}
	return nil
}

// writeChunk is the largest write(2) of a cache file.
const writeChunk = 256 << 10

// copyBufs are the buffers of cache writes from a stream (a download):
// the socket reads and file writes come in pieces of writeChunk, not
// os.File.ReadFrom's 32 KiB.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, writeChunk); return &b }}

// chunkWriter writes to a file in pieces of at most writeChunk bytes. It
// has no ReadFrom, so io.CopyBuffer uses the given buffer. Measured on
// ext4 (a 2-core VM): one write(2) of 50 MB from memory took 90-245 ms,
// the same bytes in 256 KiB writes 17-26 ms; the push's copy of its
// modules into the cache was the whole of its gap to ORAS.
type chunkWriter struct{ f *os.File }

func (c chunkWriter) Write(b []byte) (int, error) {
	var n int
	for len(b) > 0 {
		k, err := c.f.Write(b[:min(len(b), writeChunk)])
		n += k
		if err != nil {
			return n, err
		}
		b = b[k:]
	}
	return n, nil
}

// importFile copies the regular file path into the cache as a blob,
// hashing (sha256) the bytes as they are copied: what is hashed is the
// copy, so the blob is verified by construction whatever happens to the
// file meanwhile. It returns the blob's digest, size and path, and its
// first bytes (up to 8). A file over max bytes is refused.
func (c *cache) importFile(path string, max int64) (d string, size int64, blob string, head []byte, err error) {
	f, err := OpenRegular(path)
	if err != nil {
		return "", 0, "", nil, unavailable(path, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		return "", 0, "", nil, toolerr.New(toolerr.ArtifactRefused, "%s is %d bytes, over the %d-byte cap", path, st.Size(), max)
	}
	tmp, err := os.CreateTemp(c.dir("tmp"), "import.*")
	if err != nil {
		return "", 0, "", nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write to the artifact cache")
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	buf := copyBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(io.MultiWriter(chunkWriter{tmp}, h), io.LimitReader(f, max+1), *buf)
	copyBufs.Put(buf)
	if err != nil {
		return "", 0, "", nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "copying "+path+" into the artifact cache")
	}
	if n > max {
		return "", 0, "", nil, toolerr.New(toolerr.ArtifactRefused, "%s is larger than the %d-byte cap", path, max)
	}
	head = make([]byte, min(n, 8))
	if _, err := tmp.ReadAt(head, 0); err != nil {
		return "", 0, "", nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot read the artifact cache")
	}
	d = "sha256:" + hex.EncodeToString(h.Sum(nil))
	if c.fsync {
		if err := tmp.Sync(); err != nil {
			return "", 0, "", nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write to the artifact cache")
		}
	}
	if err := tmp.Close(); err != nil {
		return "", 0, "", nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write to the artifact cache")
	}
	blob = c.blobPath(d)
	if err := os.Rename(tmp.Name(), blob); err != nil {
		return "", 0, "", nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write to the artifact cache")
	}
	ok = true
	if c.fsync {
		syncDir(filepath.Dir(blob))
	}
	return d, n, blob, head, nil
}

// putBytes stores b, already verified to have digest d.
func (c *cache) putBytes(d string, b []byte) error {
	if c.has(d, int64(len(b))) {
		return nil
	}
	// b was hashed by whoever produced it: it is not hashed again.
	return c.store(d, int64(len(b)), int64(len(b)), bytes.NewReader(b), nil)
}

// moduleKey names the memo of where modulePath lives inside manifest m.
func (c *cache) moduleMemo(manifest, modulePath string) string {
	sum := sha256.Sum256([]byte(modulePath))
	alg, hexPart := digestParts(manifest)
	return c.dir("modules", alg, hexPart, hex.EncodeToString(sum[:]))
}

// lookupModule returns the module digest memoised for (manifest, modulePath).
func (c *cache) lookupModule(manifest, modulePath string) (string, bool) {
	b, err := ReadRegular(c.moduleMemo(manifest, modulePath), 128)
	if err != nil {
		return "", false
	}
	d := strings.TrimSpace(string(b))
	if checkDigest(d) != nil {
		return "", false
	}
	return d, true
}

// rememberModule memoises that modulePath inside manifest is the blob d.
// It is an optimisation: failures are ignored.
func (c *cache) rememberModule(manifest, modulePath, d string) {
	p := c.moduleMemo(manifest, modulePath)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return
	}
	tmp, err := os.CreateTemp(c.dir("tmp"), "memo.*")
	if err != nil {
		return
	}
	_, err = tmp.WriteString(d + "\n")
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
}

func syncDir(dir string) {
	if f, err := os.Open(dir); err == nil {
		_ = f.Sync()
		f.Close()
	}
}

// verifier passes bytes through while hashing them. It reports
// artifact-integrity-failed when the stream is longer than size, ends short
// (a clean EOF) or does not hash to digest. Errors of the underlying reader
// pass through unchanged (an interrupted download is not an integrity
// failure). size < 0 skips the length check.
type verifier struct {
	r      io.Reader
	c      io.Closer
	digest string
	size   int64
	n      int64
	h      hash.Hash
	what   string
	done   bool
	onFail func()
}

func (v *verifier) Read(p []byte) (int, error) {
	if v.done {
		return 0, io.EOF
	}
	n, err := v.read(p)
	if v.onFail != nil && err != nil && errors.Is(err, toolerr.ArtifactIntegrityFailed) {
		v.onFail()
		v.onFail = nil
	}
	return n, err
}

func (v *verifier) read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.n += int64(n)
	v.h.Write(p[:n])
	if v.size >= 0 && v.n > v.size {
		return 0, toolerr.New(toolerr.ArtifactIntegrityFailed, "%s %s is longer than its descriptor's %d bytes", v.what, v.digest, v.size)
	}
	if err == io.EOF {
		if v.size >= 0 && v.n != v.size {
			return n, toolerr.New(toolerr.ArtifactIntegrityFailed, "%s %s has %d bytes, its descriptor says %d", v.what, v.digest, v.n, v.size)
		}
		alg, _ := digestParts(v.digest)
		if got := alg + ":" + hex.EncodeToString(v.h.Sum(nil)); got != v.digest {
			return n, toolerr.New(toolerr.ArtifactIntegrityFailed, "%s content hashes to %s, not the expected %s", v.what, got, v.digest)
		}
		v.done = true
	}
	return n, err
}

func (v *verifier) Close() error {
	if v.c != nil {
		return v.c.Close()
	}
	return nil
}

type progressWriter struct {
	w  io.Writer
	n  int64
	fn func(int64)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.n += int64(n)
	p.fn(p.n)
	return n, err
}
