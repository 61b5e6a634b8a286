package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/sandboxd/sandboxd/toolerr"
)

func cleanPath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// module returns the bytes and digest of modulePath inside the artifact.
func (o *OCI) module(ctx context.Context, op *opened, modulePath string) ([]byte, string, error) {
	want := cleanPath(modulePath)
	if op.art.Layout == LayoutWasm {
		found, err := wasmLayer(op, modulePath, want)
		if err != nil {
			return nil, "", err
		}
		b, err := o.readBlob(ctx, op.src, *found)
		if err == nil && isComponent(b) {
			err = componentRefusal(op.ref, found.Digest)
		}
		return b, found.Digest, err
	}
	b, d, err := o.moduleFromImage(ctx, op, modulePath, want)
	if err == nil && isComponent(b) {
		err = componentRefusal(op.ref, d)
	}
	return b, d, err
}

// wasmLayer finds the layer of a Wasm-layout artifact that modulePath
// names: the one whose title equals it or, when the artifact has exactly
// one Wasm layer and that layer has no title (what oci-wasm, wkg and wash
// push), that layer whatever modulePath says.
func wasmLayer(op *opened, modulePath, want string) (*descriptor, error) {
	var found, untitled *descriptor
	var titles []string
	wasmLayers := 0
	for i, l := range op.doc.Layers {
		if isWasmLayer(l.MediaType) {
			wasmLayers++
		}
		t := l.Annotations[AnnotationTitle]
		if t == "" {
			if isWasmLayer(l.MediaType) {
				untitled = &op.doc.Layers[i]
			}
			continue
		}
		titles = append(titles, t)
		if cleanPath(t) != want {
			continue
		}
		if found != nil {
			return nil, toolerr.New(toolerr.ArtifactRefused, "%s: two layers are titled %q", op.ref, t)
		}
		found = &op.doc.Layers[i]
	}
	if found == nil && untitled != nil && wasmLayers == 1 {
		found = untitled
	}
	if found == nil {
		if len(titles) == 0 {
			return nil, toolerr.New(toolerr.ArtifactUnavailable, "%s has no module %q: it has %d Wasm layers and none is titled (%s)", op.ref, modulePath, wasmLayers, AnnotationTitle)
		}
		return nil, toolerr.New(toolerr.ArtifactUnavailable, "%s has no module %q (its layers are titled: %s)", op.ref, modulePath, strings.Join(titles, ", "))
	}
	if !isWasmLayer(found.MediaType) {
		return nil, toolerr.New(toolerr.ArtifactRefused, "%s: layer %q has media type %q, not %s", op.ref, modulePath, found.MediaType, MediaTypeWasmLayer)
	}
	return found, nil
}

// isComponent reports whether b is a WebAssembly component binary (the
// component model's preamble: version 0x0d, layer 1) rather than a module.
func isComponent(b []byte) bool {
	return len(b) >= 8 && string(b[:4]) == "\x00asm" && b[4] == 0x0d && b[5] == 0 && b[6] == 1 && b[7] == 0
}

// readBlob reads a whole blob, verified, after checking its size against the cap.
func (o *OCI) readBlob(ctx context.Context, src source, l descriptor) ([]byte, error) {
	if l.Size > o.cfg.maxBlob {
		return nil, toolerr.New(toolerr.ArtifactRefused, "blob %s is %d bytes, over the %d-byte cap", l.Digest, l.Size, o.cfg.maxBlob)
	}
	b, err := readAll(ctx, src, l)
	if _, remote := src.(*remoteSource); remote && errors.Is(err, toolerr.ArtifactIntegrityFailed) {
		// A cached copy that went bad was removed: fetch it once more.
		b, err = readAll(ctx, src, l)
	}
	return b, err
}

func readAll(ctx context.Context, src source, l descriptor) ([]byte, error) {
	rc, err := src.blob(ctx, l.Digest, l.Size, nil)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	buf := bytes.NewBuffer(make([]byte, 0, l.Size+bytes.MinRead))
	if _, err := buf.ReadFrom(rc); err != nil {
		return nil, readError(ctx, err, l.Digest)
	}
	return buf.Bytes(), nil
}

func readError(ctx context.Context, err error, d string) error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	if ctx.Err() != nil {
		if d == "" {
			return ctxError(ctx, "pulling")
		}
		return ctxError(ctx, "reading blob "+d)
	}
	return newErr(toolerr.ArtifactUnavailable, err, "reading blob %s: %v", d, err)
}

// moduleFromImage finds modulePath in an image's tar layers, top layer
// first, honouring whiteouts. The module is cached as its own blob and the
// finding memoised, so a later resolve reads neither layer.
func (o *OCI) moduleFromImage(ctx context.Context, op *opened, modulePath, want string) ([]byte, string, error) {
	rs, remote := op.src.(*remoteSource)
	if remote {
		if md, ok := rs.cache.lookupModule(op.art.Digest, want); ok {
			if b, err := rs.cache.readBlob(md, -1); err == nil {
				return b, md, nil
			}
		}
	}
layers:
	for i := len(op.doc.Layers) - 1; i >= 0; i-- {
		l := op.doc.Layers[i]
		isTar, comp := tarLayer(l.MediaType)
		if !isTar {
			return nil, "", toolerr.New(toolerr.ArtifactRefused, "%s: layer %s has media type %q, not a tar layer", op.ref, l.Digest, l.MediaType)
		}
		if l.Size > o.cfg.maxBlob {
			return nil, "", toolerr.New(toolerr.ArtifactRefused, "%s: layer %s is %d bytes, over the %d-byte cap", op.ref, l.Digest, l.Size, o.cfg.maxBlob)
		}
		res, err := o.scanLayer(ctx, op.src, l, comp, want, 0)
		if err != nil {
			return nil, "", err
		}
		switch res.state {
		case tarFound:
			d := Digest(res.data)
			if remote {
				if err := rs.cache.putBytes(d, res.data); err == nil {
					rs.cache.rememberModule(op.art.Digest, want, d)
				}
			}
			return res.data, d, nil
		case tarDeleted, tarOpaque:
			break layers // lower layers are hidden
		}
	}
	return nil, "", toolerr.New(toolerr.ArtifactUnavailable, "%s has no file %q in its layers", op.ref, modulePath)
}

type tarState int

const (
	tarAbsent tarState = iota
	tarFound
	tarDeleted
	tarOpaque
)

type scanResult struct {
	state tarState
	data  []byte
}

// scanLayer reads one tar layer to its end (so its digest is verified) and
// reports what it says about path want.
func (o *OCI) scanLayer(ctx context.Context, src source, l descriptor, comp string, want string, depth int) (scanResult, error) {
	rc, err := src.blob(ctx, l.Digest, l.Size, nil)
	if err != nil {
		return scanResult{}, err
	}
	defer rc.Close()
	// A layer that does not parse may simply have been tampered with: when
	// its digest is wrong too, that is the error to report.
	parseErr := func(ctx context.Context, err error, l descriptor) error {
		if _, derr := io.Copy(io.Discard, rc); errors.Is(derr, toolerr.ArtifactIntegrityFailed) {
			return derr
		}
		return layerError(ctx, err, l)
	}
	var r io.Reader = rc
	switch comp {
	case compGzip:
		zr, err := gzip.NewReader(rc)
		if err != nil {
			return scanResult{}, parseErr(ctx, err, l)
		}
		defer zr.Close()
		r = zr
	case compZstd:
		zr, err := zstd.NewReader(rc, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecoderLowmem(true))
		if err != nil {
			return scanResult{}, parseErr(ctx, err, l)
		}
		defer zr.Close()
		r = zr
	}
	// As a pack image's layers (packtree.go): the context checked on every
	// read of the unpacked stream, and the decompression-ratio cap as well
	// as maxUnpacked.
	limit, byRatio := unpackCap(l.Size, comp)
	lim := &layerReader{ctx: ctx, r: r, max: limit, capErr: func() error {
		if byRatio {
			return toolerr.New(toolerr.ArtifactRefused, "layer %s unpacks to more than %d bytes, %d times its %d bytes (the decompression-ratio cap)", l.Digest, limit, maxLayerRatio, l.Size)
		}
		return toolerr.New(toolerr.ArtifactRefused, "layer %s unpacks to more than %d bytes", l.Digest, limit)
	}}
	tr := tar.NewReader(lim)
	var res scanResult
	var link string
	for {
		if err := ctx.Err(); err != nil {
			return scanResult{}, toolerr.As(err)
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return scanResult{}, parseErr(ctx, err, l)
		}
		name := cleanPath(h.Name)
		hdir, hbase := path.Dir(name), path.Base(name)
		switch {
		case name == want:
			switch h.Typeflag {
			case tar.TypeReg: // archive/tar reports old TypeRegA entries as TypeReg
				if h.Size > o.cfg.maxBlob {
					return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s is %d bytes, over the %d-byte cap", want, l.Digest, h.Size, o.cfg.maxBlob)
				}
				b, err := io.ReadAll(io.LimitReader(tr, h.Size))
				if err != nil {
					return scanResult{}, parseErr(ctx, err, l)
				}
				res = scanResult{state: tarFound, data: b}
				link = ""
			case tar.TypeLink:
				link = cleanPath(h.Linkname)
				res = scanResult{state: tarFound}
			case tar.TypeSymlink:
				return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s is a symbolic link; point modulePath at the file", want, l.Digest)
			default:
				return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s is not a regular file", want, l.Digest)
			}
		case strings.HasPrefix(hbase, ".wh.") && hbase != ".wh..wh..opq":
			// dir/.wh.x deletes dir/x and, for a directory, all below it.
			gone := path.Join(hdir, strings.TrimPrefix(hbase, ".wh."))
			if (gone == want || strings.HasPrefix(want, gone+"/")) && res.state != tarFound {
				res = scanResult{state: tarDeleted}
			}
		case hbase == ".wh..wh..opq" && (hdir == "." || strings.HasPrefix(want, hdir+"/")):
			if res.state != tarFound {
				res = scanResult{state: tarOpaque}
			}
		}
	}
	if lim.err != nil {
		return scanResult{}, lim.err
	}
	// Drain what the tar reader left (padding, gzip trailer) so the
	// verifier sees the whole blob; only then are the bytes trusted.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return scanResult{}, readError(ctx, err, l.Digest)
	}
	if res.state == tarFound && res.data == nil {
		if depth > 0 || link == "" || link == want {
			return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s is a hard link that cannot be followed", want, l.Digest)
		}
		sub, err := o.scanLayer(ctx, src, l, comp, link, depth+1)
		if err != nil {
			return scanResult{}, err
		}
		if sub.state != tarFound {
			return scanResult{}, toolerr.New(toolerr.ArtifactRefused, "%q in layer %s links to %q, which the layer lacks", want, l.Digest, link)
		}
		return sub, nil
	}
	return res, nil
}

func isZstdError(err error) bool {
	for _, e := range []error{zstd.ErrMagicMismatch, zstd.ErrReservedBlockType, zstd.ErrCompressedSizeTooBig, zstd.ErrBlockTooSmall, zstd.ErrWindowSizeExceeded, zstd.ErrWindowSizeTooSmall, zstd.ErrCRCMismatch, zstd.ErrUnknownDictionary, zstd.ErrFrameSizeExceeded, zstd.ErrFrameSizeMismatch, zstd.ErrDecoderSizeExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func layerError(ctx context.Context, err error, l descriptor) error {
	var te *toolerr.Error
	if errors.As(err, &te) {
		return te
	}
	if ctx.Err() != nil {
		return toolerr.As(ctx.Err())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, gzip.ErrHeader) || isZstdError(err) || errors.Is(err, gzip.ErrChecksum) || errors.Is(err, tar.ErrHeader) {
		return toolerr.Wrap(toolerr.ArtifactRefused, err, fmt.Sprintf("layer %s (%s) is not a valid archive", l.Digest, l.MediaType))
	}
	return toolerr.Wrap(toolerr.ArtifactUnavailable, err, "reading layer "+l.Digest)
}
