package artifact

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sandboxd/sandboxd/toolerr"
)

// layoutSource reads an OCI image layout directory: oci-layout, index.json
// and blobs/sha256/<hex>. Every blob is size-checked against its descriptor
// before it is read and verified against its digest while it is read.
// See https://github.com/opencontainers/image-spec/blob/main/image-layout.md.
type layoutSource struct {
	dir string
}

type layoutIndex struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType,omitempty"`
	Manifests     []descriptor `json:"manifests"`
}

func (s *layoutSource) readIndex() (*layoutIndex, error) {
	st, err := os.Stat(s.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, toolerr.New(toolerr.ArtifactUnavailable, "OCI layout directory %s does not exist", s.dir)
		}
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "OCI layout directory")
	}
	if !st.IsDir() {
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "%s is not an OCI layout directory", s.dir)
	}
	b, err := readCapped(filepath.Join(s.dir, "index.json"), MaxManifestSize)
	if err != nil {
		return nil, err
	}
	var idx layoutIndex
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, fmt.Sprintf("%s/index.json is not an OCI index", s.dir))
	}
	return &idx, nil
}

func readCapped(p string, max int64) ([]byte, error) {
	f, err := OpenRegular(p)
	if err != nil {
		return nil, unavailable(p, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > max {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s is %d bytes, over the %d-byte cap", p, st.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "")
	}
	if int64(len(b)) > max {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s is over the %d-byte cap", p, max)
	}
	return b, nil
}

// resolveTag finds the manifest tagged tag (annotation
// org.opencontainers.image.ref.name) in index.json. An empty tag selects the
// only manifest of a single-manifest layout.
func (s *layoutSource) resolveTag(_ context.Context, tag string) (string, int64, error) {
	idx, err := s.readIndex()
	if err != nil {
		return "", 0, err
	}
	var tags []string
	for _, m := range idx.Manifests {
		t := m.Annotations[AnnotationRefName]
		if t != "" {
			tags = append(tags, t)
		}
		if tag == "" && len(idx.Manifests) == 1 || tag != "" && t == tag {
			if err := checkDigest(m.Digest); err != nil {
				return "", 0, toolerr.Wrap(toolerr.ArtifactUnavailable, err, s.dir+"/index.json")
			}
			return m.Digest, m.Size, nil
		}
	}
	sort.Strings(tags)
	if tag == "" {
		return "", 0, toolerr.New(toolerr.ArtifactUnavailable, "OCI layout %s holds %d manifests; name one with :tag or @digest (tags: %s)", s.dir, len(idx.Manifests), strings.Join(tags, ", "))
	}
	return "", 0, toolerr.New(toolerr.ArtifactUnavailable, "OCI layout %s has no manifest tagged %q (tags: %s)", s.dir, tag, strings.Join(tags, ", "))
}

func (s *layoutSource) blobPath(d string) string {
	alg, hexPart := digestParts(d)
	return filepath.Join(s.dir, "blobs", alg, hexPart)
}

func (s *layoutSource) manifest(ctx context.Context, d string, size int64) ([]byte, error) {
	if size > MaxManifestSize {
		return nil, toolerr.New(toolerr.ArtifactRefused, "manifest %s is %d bytes, over the %d-byte cap", d, size, MaxManifestSize)
	}
	rc, err := s.open(d, size, MaxManifestSize, "manifest")
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func (s *layoutSource) blob(_ context.Context, d string, size int64, progress func(int64)) (io.ReadCloser, error) {
	return s.open(d, size, -1, "blob")
}

func (s *layoutSource) fetch(ctx context.Context, d string, size int64, progress func(int64)) error {
	rc, err := s.blob(ctx, d, size, progress)
	if err != nil {
		return err
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	return err
}

func (s *layoutSource) open(d string, size, max int64, what string) (io.ReadCloser, error) {
	p := s.blobPath(d)
	f, err := OpenRegular(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, toolerr.New(toolerr.ArtifactUnavailable, "OCI layout %s lacks %s %s", s.dir, what, d)
		}
		if errors.Is(err, ErrNotRegular) {
			return nil, toolerr.New(toolerr.ArtifactUnavailable, "OCI layout %s: %s %s is not a regular file", s.dir, what, d)
		}
		return nil, toolerr.Wrap(toolerr.ArtifactUnavailable, err, "")
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "OCI layout %s: %s %s is not a regular file", s.dir, what, d)
	}
	if max >= 0 && st.Size() > max {
		f.Close()
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s %s is %d bytes, over the %d-byte cap", what, d, st.Size(), max)
	}
	if size >= 0 && st.Size() != size {
		f.Close()
		return nil, toolerr.New(toolerr.ArtifactIntegrityFailed, "OCI layout %s: %s %s has %d bytes, its descriptor says %d", s.dir, what, d, st.Size(), size)
	}
	return &verifier{r: f, c: f, digest: d, size: st.Size(), h: digestHash(d), what: what}, nil
}

// writeLayout stores blobs and a manifest in the OCI layout directory dir
// (created when absent) and points tag at it in index.json, replacing any
// manifest the tag named before. Files are written atomically.
func writeLayout(dir, tag string, blobs map[string][]byte, manifest []byte, manifestType string) error {
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot create the OCI layout")
	}
	if err := atomicWrite(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`+"\n")); err != nil {
		return err
	}
	md := Digest(manifest)
	blobs[md] = manifest
	for d, b := range blobs {
		alg, hexPart := digestParts(d)
		if err := os.MkdirAll(filepath.Join(dir, "blobs", alg), 0o755); err != nil {
			return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot create the OCI layout")
		}
		p := filepath.Join(dir, "blobs", alg, hexPart)
		if st, err := os.Stat(p); err == nil && st.Size() == int64(len(b)) {
			continue
		}
		if err := atomicWrite(p, b); err != nil {
			return err
		}
	}
	idx := &layoutIndex{SchemaVersion: 2, MediaType: mediaTypeOCIIndex}
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err == nil {
		old, err := (&layoutSource{dir: dir}).readIndex()
		if err != nil {
			return err
		}
		for _, m := range old.Manifests {
			if tag == "" || m.Annotations[AnnotationRefName] != tag {
				idx.Manifests = append(idx.Manifests, m)
			}
		}
	}
	nd := descriptor{MediaType: manifestType, Digest: md, Size: int64(len(manifest))}
	if tag != "" {
		nd.Annotations = map[string]string{AnnotationRefName: tag}
	}
	idx.Manifests = append(idx.Manifests, nd)
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return toolerr.Wrap(toolerr.Internal, err, "")
	}
	return atomicWrite(filepath.Join(dir, "index.json"), append(b, '\n'))
}

// atomicWrite writes b to p (mode 0644) through a temporary file, fsync and rename.
func atomicWrite(p string, b []byte) error { return atomicWriteMode(p, b, 0o644) }

// atomicWriteMode is atomicWrite with the file's mode.
func atomicWriteMode(p string, b []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-"+filepath.Base(p)+".*")
	if err != nil {
		return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write "+p)
	}
	_, err = tmp.Write(b)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), mode)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "cannot write "+p)
	}
	syncDir(filepath.Dir(p))
	return nil
}
