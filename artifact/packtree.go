package artifact

import (
	"context"
	"io"
	"strings"

	"github.com/sandboxd/sandboxd/toolerr"
)

// Bounds on the work a pack image's layers can cause (see applyLayer).
const (
	// maxEntryName caps a tar entry's name (after the leading "/" or "./"
	// is stripped): Linux's PATH_MAX, so no runtime could unpack a longer
	// one. It bounds the work of one entry at any depth.
	maxEntryName = 4096
	// maxLayerRatio caps how many bytes a compressed layer may unpack to
	// per byte of it (beyond layerRatioFloor): a gzip or zstd bomb is
	// refused after a bounded amount of work per byte pulled. Real layers
	// compress 2-20 times; a tar of empty files about 80 times.
	maxLayerRatio = 256
	// layerRatioFloor is what any compressed layer may unpack to whatever
	// its size.
	layerRatioFloor = 64 << 20
	// applyCheckEvery is how many tree steps pass between context checks
	// while a read layer is applied.
	applyCheckEvery = 1 << 12
)

// packTree is the files of a pack image being built, as a tree of path
// elements, so applying a layer costs what the layer holds, not what the
// layers below it hold: a whiteout drops one subtree (a map delete at its
// parent), an opaque marker drops one directory's children, whatever they
// contain. steps counts the nodes visited, for the tests that bound the
// work per entry.
type packTree struct {
	root  packNode
	steps int64
}

type packNode struct {
	name string     // the full path, for an entry
	e    *packEntry // nil for a directory only implied by what is below it
	kids map[string]*packNode
}

// find returns the node of name ("." or "" is the root), creating the path
// when create is set; nil when it is absent. parent and base are name's
// parent node and last element (parent nil for the root).
func (t *packTree) find(name string, create bool) (n, parent *packNode, base string) {
	n = &t.root
	if name == "" || name == "." {
		return n, nil, ""
	}
	for rest := name; ; {
		el := rest
		i := strings.IndexByte(rest, '/')
		if i >= 0 {
			el, rest = rest[:i], rest[i+1:]
		}
		t.steps++
		next := n.kids[el]
		if next == nil {
			if !create {
				return nil, nil, ""
			}
			if n.kids == nil {
				n.kids = map[string]*packNode{}
			}
			next = &packNode{}
			n.kids[el] = next
		}
		parent, n, base = n, next, el
		if i < 0 {
			return n, parent, base
		}
	}
}

// get returns the entry named name.
func (t *packTree) get(name string) (packEntry, bool) {
	n, _, _ := t.find(name, false)
	if n == nil || n.e == nil {
		return packEntry{}, false
	}
	return *n.e, true
}

// put sets the entry named name (what is below it stays).
func (t *packTree) put(name string, e packEntry) {
	n, _, _ := t.find(name, true)
	n.name, n.e = name, &e
}

// remove drops name and everything below it (a whiteout).
func (t *packTree) remove(name string) {
	n, parent, base := t.find(name, false)
	switch {
	case n == nil:
	case parent == nil:
		t.root = packNode{}
	default:
		delete(parent.kids, base)
	}
}

// clearBelow drops everything below name, keeping its own entry (an
// opaque marker in directory name; a file replacing a directory).
func (t *packTree) clearBelow(name string) {
	if n, _, _ := t.find(name, false); n != nil {
		n.kids = nil
	}
}

// clearEntry drops the entry named name, keeping what is below it (a
// directory replacing a file).
func (t *packTree) clearEntry(name string) {
	if n, _, _ := t.find(name, false); n != nil {
		n.e = nil
	}
}

// files returns every entry by its full path.
func (t *packTree) files(ctx context.Context) (map[string]packEntry, error) {
	out := map[string]packEntry{}
	stack := []*packNode{&t.root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if t.steps++; t.steps%applyCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, toolerr.As(err)
			}
		}
		if n.e != nil {
			out[n.name] = *n.e
		}
		for _, k := range n.kids {
			stack = append(stack, k)
		}
	}
	return out, nil
}

// check returns the context's error every applyCheckEvery steps.
func (t *packTree) check(ctx context.Context, last *int64) error {
	if t.steps-*last < applyCheckEvery {
		return nil
	}
	*last = t.steps
	if err := ctx.Err(); err != nil {
		return toolerr.As(err)
	}
	return nil
}

// touches reports whether changing name (and what is below it) can change
// what is kept below keep: name is keep, below it, or above it.
func touches(name, keep string) bool {
	return name == "." || name == keep || strings.HasPrefix(name, keep+"/") || strings.HasPrefix(keep, name+"/")
}

// below reports whether name is keep or below it.
func below(name, keep string) bool {
	return name == keep || strings.HasPrefix(name, keep+"/")
}

// layerReader is the unpacked bytes of a layer as the tar reader reads
// them: every read first checks the context (so a stop is seen within one
// read of at most a few hundred KiB, however the bytes are produced), and
// more than max bytes in all refuse the layer with the cap's own error
// (capErr), not a truncated archive.
type layerReader struct {
	ctx    context.Context
	r      io.Reader
	n, max int64
	capErr func() error
	err    error
}

func (r *layerReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if err := r.ctx.Err(); err != nil {
		r.err = toolerr.As(err)
		return 0, r.err
	}
	if left := r.max + 1 - r.n; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := r.r.Read(p)
	if r.n += int64(n); r.n > r.max {
		r.err = r.capErr()
		return 0, r.err
	}
	return n, err
}

// unpackCap is how many bytes a layer of size bytes, compressed with comp,
// may unpack to: maxUnpacked for a plain tar, else also maxLayerRatio
// times its size (at least layerRatioFloor). ratio reports whether the
// ratio is what binds.
func unpackCap(size int64, comp string) (limit int64, ratio bool) {
	if comp == compNone {
		return maxUnpacked, false
	}
	limit = max(int64(layerRatioFloor), size*maxLayerRatio)
	if limit >= maxUnpacked {
		return maxUnpacked, false
	}
	return limit, true
}
